package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/goroce/goroce/internal/bench"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/perftest"
)

// runBench is `goroce bench`: perftest's write bandwidth and latency tests
// between two devices of this process on two loopback addresses, and the
// same transfer over TCP, in one run.
func runBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	size := fs.Int("s", 65536, "bandwidth test message size in bytes")
	iters := fs.Int("n", 5000, "bandwidth test iterations per QP")
	qps := fs.Int("q", 1, "QPs (and TCP connections)")
	dur := fs.Int("D", 0, "run the bandwidth tests for this many seconds instead of -n iterations")
	op := fs.String("op", "write", "operation: write, read or send")
	latIters := fs.Int("lat-n", 1000, "latency test iterations")
	noLat := fs.Bool("no-lat", false, "skip the latency test")
	addrs := fs.String("addrs", "127.0.0.1,127.0.0.2", "the two devices' addresses: server,client")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the goroce tests (not the TCP ones) to this file")
	traceFile := fs.String("trace", "", "write a Go execution trace of the goroce bandwidth test to this file (go tool trace)")
	counters := fs.Bool("counters", false, "print the devices' non-zero counters after the bandwidth test")
	procs := fs.Int("procs", 0, "GOMAXPROCS for the goroce bandwidth tests (0: the process's own; the bandwidth tools run on 1)")
	poll := fs.Bool("poll", false, "the goroce bandwidth tests' waits busy-poll on both sides, as the bandwidth tools' do (a core per device)")
	sameHost := fs.Bool("samehost", false, "run goroce over the same-host path (shared memory, as GOROCE_SAMEHOST=1 does) instead of UDP")
	rounds := fs.Int("rounds", 1, "run the comparison this many times and print the medians (and ranges) of its figures and of each round's ratios; with -sweep, measure each point this many times, each round over all of a section's points, and print the medians")
	sweep := fs.Bool("sweep", false, "sweep sizes 2 B … 8 MiB and QP counts 1 … 1024, goroce against TCP")
	plot := fs.String("plot", "", "with -sweep or -replot: write an SVG plot of the sweep to this file")
	replot := fs.String("replot", "", "plot the tables a sweep printed, saved in this file (with -plot), without measuring")
	maxSize := fs.Int("max-size", 8<<20, "with -sweep: the largest message size")
	maxQPs := fs.Int("max-qps", 1024, "with -sweep: the largest QP count")
	sweepBytes := fs.Int64("bytes", 256<<20, "with -sweep: bytes each bandwidth point moves")
	veth := fs.Bool("veth", false, "run both ends, goroce and TCP, in two network namespaces made for the run and joined by a veth pair, at "+bench.VethServer.String()+" and "+bench.VethClient.String()+" (root; needs the ip command)")
	vethMTU := fs.Int("veth-mtu", 9000, "with -veth: the veth pair's MTU (9000 gives RoCE MTU 4096)")
	targets := fs.Bool("targets", false, "measure issue 8's targets between two processes: goroce's perftest tools and TCP, each end in its own process, and the kernel's floor under the latency (a bare UDP ping-pong) (takes -s, -n: messages of each bandwidth test in all, split over its QPs, default 40960, -lat-n: default 20000, -rate-n, -qps, -rounds, -samehost, -addrs or -veth)")
	rateIters := fs.Int("rate-n", 1_000_000, "with -targets: 64-byte messages of the message rate test")
	qpList := fs.String("qps", "16,256,1024", "with -targets: the QP counts measured against one QP")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: goroce bench [-s SIZE] [-n ITERS] [-q QPS] [-D SECONDS] [-op write|read|send] [-lat-n N] [-no-lat] [-samehost] [-procs N] [-poll] [-rounds N] [-addrs A,B | -veth]")
		fmt.Fprintln(stderr, "       goroce bench -sweep [-rounds N] [-plot FILE.svg] [-max-size N] [-max-qps N] [-bytes N] [-op OP] [-addrs A,B | -veth]")
		fmt.Fprintln(stderr, "       goroce bench -targets [-rounds N] [-s SIZE] [-n ITERS] [-lat-n N] [-rate-n N] [-qps 16,256,1024] [-samehost] [-addrs A,B | -veth]")
		fmt.Fprintln(stderr, "       goroce bench -replot SWEEP.txt -plot FILE.svg")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goroce bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	verbs := map[string]perftest.Verb{"write": perftest.Write, "read": perftest.Read, "send": perftest.Send}
	v, ok := verbs[*op]
	if !ok {
		fmt.Fprintf(stderr, "goroce bench: -op %q: want write, read or send\n", *op)
		return 2
	}
	cfg := bench.Config{Verb: v, Size: *size, Iters: *iters, QPs: *qps, Duration: *dur, LatIters: *latIters, NoLat: *noLat, Procs: *procs, Poll: *poll}
	// GOROCE_SAMEHOST=1 would turn the path on in verbs.Open anyway; taking
	// it here too makes the report say which path ran.
	cfg.SameHost = *sameHost || os.Getenv("GOROCE_SAMEHOST") == "1"
	var a, b string
	if n, _ := fmt.Sscanf(replaceComma(*addrs), "%s %s", &a, &b); n != 2 {
		fmt.Fprintf(stderr, "goroce bench: -addrs %q: want two addresses, server,client\n", *addrs)
		return 2
	}
	var err error
	if cfg.Server, err = netip.ParseAddr(a); err == nil {
		cfg.Client, err = netip.ParseAddr(b)
	}
	if err != nil {
		fmt.Fprintf(stderr, "goroce bench: -addrs: %v\n", err)
		return 2
	}
	if *replot != "" {
		return runReplot(*replot, *plot, stdout, stderr)
	}
	var tc *bench.TargetsConfig
	if *targets {
		t, err := targetsConfig(fs, cfg, targetFlags{size: *size, iters: *iters, latIters: *latIters, rateIters: *rateIters, rounds: *rounds, qps: *qpList})
		if err != nil {
			fmt.Fprintf(stderr, "goroce bench: %v\n", err)
			return 2
		}
		tc = &t
	}
	network := "loopback"
	var vp *netns.Veth
	if *veth {
		addrsSet := false
		fs.Visit(func(f *flag.Flag) { addrsSet = addrsSet || f.Name == "addrs" })
		if addrsSet || cfg.SameHost {
			fmt.Fprintln(stderr, "goroce bench: -veth picks the addresses and runs over UDP: it excludes -addrs and -samehost (the same-host path joins devices of one namespace)")
			return 2
		}
		var stop func()
		if vp, stop, err = bench.NewVeth("goroce-bench", *vethMTU, "goroce bench", stderr); err != nil {
			fmt.Fprintf(stderr, "goroce bench: -veth: %v\n", err)
			return 1
		}
		defer stop()
		cfg.Server, cfg.Client = vp.A, vp.B
		cfg.ServerNS, cfg.ClientNS = vp.NSA, vp.NSB
		network = fmt.Sprintf("veth between two namespaces, MTU %d", *vethMTU)
	}
	if tc != nil {
		tc.Server, tc.Client, tc.Network, tc.Veth = cfg.Server, cfg.Client, network, vp != nil
		return runTargets(*tc, vp, stdout, stderr)
	}
	if *rounds < 1 || *rounds > 1 && (*cpuProfile != "" || *traceFile != "") {
		fmt.Fprintf(stderr, "goroce bench: -rounds %d: want 1 or more, and 1 with -cpuprofile or -trace\n", *rounds)
		return 2
	}
	if *sweep {
		return runSweep(v, cfg, network, *maxSize, *maxQPs, *rounds, *sweepBytes, *plot, stdout, stderr)
	}
	// The profile and the trace go to files created here.
	for _, out := range []struct {
		name string
		w    *io.Writer
	}{{*cpuProfile, &cfg.Profile}, {*traceFile, &cfg.Trace}} {
		if out.name == "" {
			continue
		}
		f, err := os.Create(out.name)
		if err != nil {
			fmt.Fprintf(stderr, "goroce bench: %v\n", err)
			return 1
		}
		defer f.Close()
		*out.w = f
	}
	cfg.Counters = *counters
	if *rounds > 1 {
		_, err = bench.Rounds(cfg, *rounds, stdout)
	} else {
		_, err = bench.Run(cfg, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "goroce bench: %v\n", err)
		return 1
	}
	return 0
}

// targetFlags are the values of the flags goroce bench -targets takes
// besides those of the network (-addrs, -samehost, -veth).
type targetFlags struct {
	size, iters, latIters, rateIters, rounds int
	qps                                      string
}

// targetsConfig checks the flags of goroce bench -targets (fs holds those
// set) and returns its configuration, whose addresses and network the
// caller sets.
func targetsConfig(fs *flag.FlagSet, cfg bench.Config, f targetFlags) (bench.TargetsConfig, error) {
	tc := bench.TargetsConfig{Rounds: f.rounds, SameHost: cfg.SameHost, Size: f.size, RateIters: f.rateIters}
	allowed := map[string]bool{"targets": true, "s": true, "n": true, "lat-n": true, "rate-n": true, "qps": true, "rounds": true, "samehost": true, "addrs": true, "veth": true, "veth-mtu": true}
	var err error
	fs.Visit(func(fl *flag.Flag) {
		switch {
		case !allowed[fl.Name]:
			err = fmt.Errorf("-%s does not apply to -targets", fl.Name)
		case fl.Name == "n":
			tc.Iters = f.iters
		case fl.Name == "lat-n":
			tc.LatIters = f.latIters
		}
	})
	if err == nil {
		tc.QPs, err = parseQPs(f.qps)
	}
	if err == nil && (f.rounds < 1 || f.size < 1 || f.rateIters < 1 || f.iters < 1 || f.latIters < 1) {
		err = fmt.Errorf("-rounds, -s, -n, -lat-n and -rate-n want positive numbers")
	}
	return tc, err
}

// runTargets is goroce bench -targets: each end runs as this program's
// endCommand, in vp's namespaces if vp is not nil (the server's in the
// first).
func runTargets(tc bench.TargetsConfig, vp *netns.Veth, stdout, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "goroce bench: -targets: %v\n", err)
		return 1
	}
	tc.Command = func(server bool, args ...string) *exec.Cmd {
		args = append([]string{endCommand}, args...)
		if vp != nil {
			return vp.Command(!server, exe, args...)
		}
		return exec.Command(exe, args...)
	}
	if _, err := bench.Targets(tc, stdout); err != nil {
		fmt.Fprintf(stderr, "goroce bench: -targets: %v\n", err)
		return 1
	}
	return 0
}

// parseQPs parses -qps: QP counts, comma-separated, each 1 or more.
func parseQPs(s string) ([]int, error) {
	var qps []int
	for _, f := range strings.Split(s, ",") {
		q, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || q < 1 {
			return nil, fmt.Errorf("-qps %q: want QP counts, comma-separated, each 1 or more", s)
		}
		qps = append(qps, q)
	}
	return qps, nil
}

func replaceComma(s string) string {
	b := []byte(s)
	for i := range b {
		if b[i] == ',' {
			b[i] = ' '
		}
	}
	return string(b)
}

// runSweep is goroce bench -sweep.
func runSweep(v perftest.Verb, cfg bench.Config, network string, maxSize, maxQPs, rounds int, total int64, plot string, stdout, stderr io.Writer) int {
	sc := bench.SweepConfig{Verb: v, MaxSize: maxSize, Bytes: total, LatIters: cfg.LatIters, Server: cfg.Server, Client: cfg.Client, SameHost: cfg.SameHost, Procs: cfg.Procs, Poll: cfg.Poll,
		ServerNS: cfg.ServerNS, ClientNS: cfg.ClientNS, Network: network, Rounds: rounds}
	for q := 1; q <= maxQPs; q *= 2 {
		sc.QPs = append(sc.QPs, q)
	}
	sc.MaxLatSize = min(maxSize, 1<<20)
	res, err := bench.Sweep(sc, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "goroce bench: %v\n", err)
		return 1
	}
	if plot != "" {
		return writePlot(res, plot, stdout, stderr)
	}
	return 0
}

// writePlot writes res as an SVG plot to the file plot.
func writePlot(res *bench.SweepResult, plot string, stdout, stderr io.Writer) int {
	f, err := os.Create(plot)
	if err == nil {
		title := "goroce against TCP, same run, " + res.Network
		if res.SameHost {
			title = "goroce (same-host path) against TCP, same run, " + res.Network
		}
		if res.Rounds > 1 {
			title += fmt.Sprintf(", medians of %d rounds", res.Rounds)
		}
		err = bench.WritePlot(f, res, title)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "goroce bench: -plot: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\n plot: %s\n", plot)
	return 0
}

// runReplot is goroce bench -replot: the plot of a sweep's saved tables.
func runReplot(tables, plot string, stdout, stderr io.Writer) int {
	if plot == "" {
		fmt.Fprintf(stderr, "goroce bench: -replot needs -plot FILE.svg\n")
		return 2
	}
	f, err := os.Open(tables)
	if err != nil {
		fmt.Fprintf(stderr, "goroce bench: -replot: %v\n", err)
		return 1
	}
	defer f.Close()
	res, err := bench.ParseSweep(f)
	if err != nil {
		fmt.Fprintf(stderr, "goroce bench: -replot %s: %v\n", tables, err)
		return 1
	}
	return writePlot(res, plot, stdout, stderr)
}
