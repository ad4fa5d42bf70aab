package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/goroce/goroce/internal/bench"
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
	rounds := fs.Int("rounds", 1, "run the comparison this many times and print the medians (and ranges) of its figures and of each round's ratios")
	veth := fs.Bool("veth", false, "run both ends, goroce and TCP, in two network namespaces made for the run and joined by a veth pair, at "+bench.VethServer.String()+" and "+bench.VethClient.String()+" (root; needs the ip command)")
	vethMTU := fs.Int("veth-mtu", 9000, "with -veth: the veth pair's MTU (9000 gives RoCE MTU 4096)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: goroce bench [-s SIZE] [-n ITERS] [-q QPS] [-D SECONDS] [-op write|read|send] [-lat-n N] [-no-lat] [-samehost] [-procs N] [-poll] [-rounds N] [-addrs A,B | -veth]")
		fs.PrintDefaults()
		fmt.Fprintln(stderr, "\nThe measurements between two processes, the sweeps and the other probes are in the performance laboratory: go run ./tools/perf (tools/perf/README.md).")
	}
	if moved := labFlag(args); moved != "" {
		fmt.Fprintf(stderr, "goroce bench: -%s belongs to the performance laboratory: go run ./tools/perf %s -h (tools/perf/README.md)\n", moved, labCommand[moved])
		return 2
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
	if *rounds < 1 || *rounds > 1 && (*cpuProfile != "" || *traceFile != "") {
		fmt.Fprintf(stderr, "goroce bench: -rounds %d: want 1 or more, and 1 with -cpuprofile or -trace\n", *rounds)
		return 2
	}
	if *veth {
		addrsSet := false
		fs.Visit(func(f *flag.Flag) { addrsSet = addrsSet || f.Name == "addrs" })
		if addrsSet || cfg.SameHost {
			fmt.Fprintln(stderr, "goroce bench: -veth picks the addresses and runs over UDP: it excludes -addrs and -samehost (the same-host path joins devices of one namespace)")
			return 2
		}
		vp, stop, err := bench.NewVeth("goroce-bench", *vethMTU, "goroce bench", stderr)
		if err != nil {
			fmt.Fprintf(stderr, "goroce bench: -veth: %v\n", err)
			return 1
		}
		defer stop()
		cfg.Server, cfg.Client = vp.A, vp.B
		cfg.ServerNS, cfg.ClientNS = vp.NSA, vp.NSB
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

func replaceComma(s string) string {
	b := []byte(s)
	for i := range b {
		if b[i] == ',' {
			b[i] = ' '
		}
	}
	return string(b)
}

// labCommand maps the flags of the performance laboratory's
// measurements, which goroce bench does not take, to the command of
// tools/perf that does: a user who asks goroce bench for one is told
// where it is.
var labCommand = map[string]string{
	"targets": "targets", "rate-n": "targets", "qps": "targets",
	"sweep": "sweep", "plot": "sweep", "max-size": "sweep", "max-qps": "sweep", "bytes": "sweep",
	"replot": "replot",
}

// labFlag returns the name of the first of args that is one of
// labCommand's flags, or "".
func labFlag(args []string) string {
	for _, a := range args {
		if a == "--" {
			return ""
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if _, ok := labCommand[name]; ok {
			return name
		}
	}
	return ""
}
