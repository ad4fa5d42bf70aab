// Package pingpong is the code of goroce's rc_pingpong, uc_pingpong and
// ud_pingpong, twins of rdma-core's libibverbs/examples ping-pong tools.
package pingpong

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/verbs"
)

// Kind is the QP type a tool pings over.
type Kind = verbs.QPType

// run is rc_pingpong's main: it returns the exit status.
func run(ctx context.Context, argv0 string, args []string, stdout, stderr io.Writer) int {
	return Run(ctx, verbs.QPTypeRC, argv0, args, stdout, stderr)
}

// Run is the main of rc_pingpong (kind RC), uc_pingpong (kind UC) and
// ud_pingpong (kind UD): it returns the exit status. The three have the
// same exchange and output; ud_pingpong has fewer options (no -m and none
// of the memory options), a smaller default size, and a colon before the
// GID in its local address line.
func Run(ctx context.Context, kind Kind, argv0 string, args []string, stdout, stderr io.Writer) int {
	switch kind {
	case verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD:
	default:
		fmt.Fprintf(stderr, "%s: no ping-pong over %v QPs\n", argv0, kind)
		return 1
	}
	o, err := parseOptions(kind, args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", argv0, err)
		usage(stdout, kind, argv0)
		return 1
	}
	if err := o.unsupported(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", argv0, err)
		return 1
	}
	o.printCounters = os.Getenv(stats.PrintCountersEnv) == "1"
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
	localLine := local.String()
	if o.kind == verbs.QPTypeUD {
		localLine = local.udLocalString()
	}

	var remote dest
	if o.server != "" {
		fmt.Fprintf(stdout, "  local address:  %s\n", localLine)
		if remote, err = clientExchange(ctx, o.server, o.port, local, o.timeout); err != nil {
			return err
		}
	} else {
		// Listen before printing, so the line tells a script the port is open.
		ln, err := listen(o.port)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "  local address:  %s\n", localLine)
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
	if o.kind == verbs.QPTypeRC {
		// Only RC's responder has ACKs to send after the last message.
		p.linger(ctx, lingerQuiet, lingerMax)
	}
	return nil
}

// printCounters writes the device's counters in one line (stats.Line).
func printCounters(w io.Writer, dev *verbs.Device) {
	io.WriteString(w, stats.Line(dev.Counters()))
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
