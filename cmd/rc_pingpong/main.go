// Command rc_pingpong is goroce's ibv_rc_pingpong: it runs a ping-pong of
// SENDs over one RC queue pair between a server and a client, exchanging
// the QP addresses over TCP byte for byte as rdma-core's ibv_rc_pingpong
// (libibverbs/examples/rc_pingpong.c) does, so that the other side can be
// that tool on a Linux rxe device (run it with -g, since RoCE needs GIDs).
//
// Usage:
//
//	rc_pingpong [options]          start a server and wait for a client
//	rc_pingpong [options] <host>   connect to the server at <host>
//
// The options, defaults and output are rc_pingpong's; -d names the goroce
// device by the IP address it binds (default 127.0.0.1), so two processes
// on one host use two loopback addresses:
//
//	rc_pingpong -d 127.0.0.1 &
//	rc_pingpong -d 127.0.0.2 127.0.0.1
//
// Options goroce cannot honour (-o, -O, -P, -t, -j, -U) are refused with a
// message and exit status 1. A peer that goes silent for --timeout (5s by
// default) during the exchange or the ping-pong ends the run with an error;
// a server waits for its client without limit.
//
// Unlike rdma-core's tool, a successful run does not close its QP at once:
// it keeps answering until the peer has been silent for 150 ms (at most
// 2 s). The last packet each side gets is a SEND whose ACK may be lost;
// the peer then retransmits the SEND, and a QP that is already gone would
// leave it to fail with RETRY_EXC_ERR.
//
// Two options are goroce's own: --timeout, and --fault=SPEC, which makes
// this process's device drop, duplicate, reorder, delay, corrupt or
// CE-mark the packets it sends (verbs.Config.Fault; the grammar is in
// docs/FAULT.md), to see how an application copes with a bad network:
//
//	rc_pingpong -d 127.0.0.2 -c -s 1048576 --fault 'reorder=25%,dup=1%,delay=1ms,seed=7' 127.0.0.1
//
// With GOROCE_PRINT_COUNTERS=1 in the environment, rc_pingpong prints its
// device's counters (verbs.Device.Counters) on stderr as it exits, on
// success or failure, in one line: "counters: name=value ...", sorted by
// name.
package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/goroce/goroce/verbs"
)

func main() {
	os.Exit(run(context.Background(), filepath.Base(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr))
}

// run is rc_pingpong's main: it returns the exit status.
func run(ctx context.Context, argv0 string, args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", argv0, err)
		usage(stdout, argv0)
		return 1
	}
	if err := o.unsupported(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", argv0, err)
		return 1
	}
	o.printCounters = os.Getenv("GOROCE_PRINT_COUNTERS") == "1"
	if err := pingpongMain(ctx, &o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", argv0, err)
		return 1
	}
	return 0
}

// pingpongMain runs one side of the test and prints what rc_pingpong
// prints, and with o.printCounters the device's counters on stderr.
func pingpongMain(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	p, err := newPingpong(o)
	if err != nil {
		return err
	}
	defer p.close()
	if o.printCounters {
		defer printCounters(stderr, p.dev) // before close, which runs later
	}
	if p.routs = p.postRecv(p.rxDepth); p.routs < p.rxDepth {
		return fmt.Errorf("posted only %d of %d receives", p.routs, p.rxDepth)
	}
	if o.events {
		if err := p.cq.ReqNotify(false); err != nil {
			return fmt.Errorf("arm CQ: %w", err)
		}
	}
	if o.gidIdx < 0 {
		o.gidIdx = p.dev.GIDIndex()
	}
	gid, err := p.dev.QueryGID(o.gidIdx)
	if err != nil {
		return fmt.Errorf("GID index %d: %w", o.gidIdx, err)
	}
	local := dest{LID: 0, QPN: p.qp.QPN(), GID: gid}
	local.PSN = newRand48(int64(os.Getpid())*time.Now().Unix()).lrand48() & 0xffffff

	var remote dest
	if o.server != "" {
		fmt.Fprintf(stdout, "  local address:  %v\n", local)
		if remote, err = clientExchange(ctx, o.server, o.port, local, o.timeout); err != nil {
			return err
		}
	} else {
		// Listen before printing, so the line tells a script the port is open.
		ln, err := listen(o.port)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "  local address:  %v\n", local)
		remote, err = serverExchange(ctx, ln, local, o.timeout, func(r dest) error { return p.connect(o, local.PSN, r) })
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "  remote address: %v\n", remote)
	if o.server != "" {
		if err := p.connect(o, local.PSN, remote); err != nil {
			return err
		}
	}

	if err := p.start(o.server != ""); err != nil {
		return err
	}
	start := time.Now()
	if err := p.run(ctx); err != nil {
		return err
	}
	fmt.Fprint(stdout, report(time.Since(start), o.size, o.iters))
	p.linger(ctx, lingerQuiet, lingerMax)
	return nil
}

// printCounters writes the device's counters in one line, sorted by
// name.
func printCounters(w io.Writer, dev *verbs.Device) {
	c := dev.Counters()
	var b strings.Builder
	b.WriteString("counters:")
	for _, name := range slices.Sorted(maps.Keys(c)) {
		fmt.Fprintf(&b, " %s=%d", name, c[name])
	}
	b.WriteByte('\n')
	io.WriteString(w, b.String())
}

// report formats rc_pingpong's two result lines. rc_pingpong takes the
// elapsed time in whole microseconds from gettimeofday into a float, and
// counts the bytes of both directions.
func report(elapsed time.Duration, size, iters int) string {
	usec := float64(float32(elapsed.Microseconds()))
	bytes := int64(size) * int64(iters) * 2
	return fmt.Sprintf("%d bytes in %s seconds = %s Mbit/sec\n%d iters in %s seconds = %s usec/iter\n",
		bytes, cfloat(usec/1e6), cfloat(float64(bytes)*8/usec),
		iters, cfloat(usec/1e6), cfloat(usec/float64(iters)))
}

// cfloat formats x as C's printf("%.2f") does, "inf" and "nan" included.
func cfloat(x float64) string {
	switch s := fmt.Sprintf("%.2f", x); s {
	case "+Inf":
		return "inf"
	case "-Inf":
		return "-inf"
	case "NaN":
		return "-nan" // glibc prints 0.0/0.0 on x86 as -nan
	default:
		return s
	}
}
