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
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
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
	if err := pingpongMain(ctx, &o, stdout); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", argv0, err)
		return 1
	}
	return 0
}

// pingpongMain runs one side of the test and prints what rc_pingpong
// prints.
func pingpongMain(ctx context.Context, o *options, stdout io.Writer) error {
	p, err := newPingpong(o)
	if err != nil {
		return err
	}
	defer p.close()
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
	return nil
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
