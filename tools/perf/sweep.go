package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/goroce/goroce/internal/perftest"
	"github.com/goroce/goroce/tools/perf/internal/sweep"
)

// runSweep is `perf sweep`: bandwidth and latency against message size
// and aggregate bandwidth against QP count, goroce against TCP, both ends
// in this process.
func runSweep(args []string, stdout, stderr io.Writer) int {
	const prog = "perf sweep"
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	op := fs.String("op", "write", "the bandwidth points' operation: write, read or send")
	maxSize := fs.Int("max-size", 8<<20, "the largest message size (sizes are the powers of two from 2)")
	maxQPs := fs.Int("max-qps", 1024, "the largest QP count (counts are the powers of two from 1)")
	total := fs.Int64("bytes", 256<<20, "bytes each bandwidth point moves")
	latIters := fs.Int("lat-n", 1000, "ping-pongs of each latency point")
	rounds := fs.Int("rounds", 1, "measure each point this many times, each round over all of a section's points, and print the medians")
	plot := fs.String("plot", "", "write an SVG plot of the sweep to this file")
	procs := fs.Int("procs", 0, "GOMAXPROCS for goroce's bandwidth points (0: the process's own)")
	poll := fs.Bool("poll", false, "goroce's bandwidth points busy-poll on both sides, as the bandwidth tools do (a core per device)")
	nf := addNetworkFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./tools/perf sweep [-rounds N] [-plot FILE.svg] [-max-size N] [-max-qps N] [-bytes N] [-lat-n N] [-op OP] [-samehost] [-addrs A,B | -veth]")
		fmt.Fprintln(stderr, "\nSweeps message sizes 2 B … 8 MiB and QP counts 1 … 1024, goroce against TCP in the same run, both ends in this")
		fmt.Fprintln(stderr, "process, and prints three tables (bandwidth and latency against size, bandwidth against QPs).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", prog, fs.Args())
		return 2
	}
	verbs := map[string]perftest.Verb{"write": perftest.Write, "read": perftest.Read, "send": perftest.Send}
	v, ok := verbs[*op]
	if !ok {
		fmt.Fprintf(stderr, "%s: -op %q: want write, read or send\n", prog, *op)
		return 2
	}
	if *rounds < 1 || *maxSize < 2 || *maxQPs < 1 || *total < 1 || *latIters < 1 {
		fmt.Fprintf(stderr, "%s: -rounds, -max-qps, -bytes and -lat-n want positive numbers, -max-size 2 or more\n", prog)
		return 2
	}
	n, code := nf.open(fs, prog, stderr)
	if n == nil {
		return code
	}
	defer n.stop()
	cfg := sweep.Config{Verb: v, MaxSize: *maxSize, MaxLatSize: min(*maxSize, 1<<20), Bytes: *total, LatIters: *latIters,
		Server: n.server, Client: n.client, ServerNS: n.serverNS, ClientNS: n.clientNS, SameHost: n.sameHost, Network: n.name,
		Procs: *procs, Poll: *poll, Rounds: *rounds}
	for q := 1; q <= *maxQPs; q *= 2 {
		cfg.QPs = append(cfg.QPs, q)
	}
	res, err := sweep.Run(cfg, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
	if *plot != "" {
		return writePlot(res, *plot, prog, stdout, stderr)
	}
	return 0
}

// runReplot is `perf replot`: the plot of a sweep's saved tables.
func runReplot(args []string, stdout, stderr io.Writer) int {
	const prog = "perf replot"
	help := len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help")
	if len(args) != 2 || help {
		fmt.Fprintln(stderr, "usage: go run ./tools/perf replot SWEEP.txt FILE.svg\n\nPlots the tables a sweep printed, saved in SWEEP.txt, without measuring.")
		if help {
			return 0
		}
		return 2
	}
	f, err := os.Open(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
	defer f.Close()
	res, err := sweep.Parse(f)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s: %v\n", prog, args[0], err)
		return 1
	}
	return writePlot(res, args[1], prog, stdout, stderr)
}

// writePlot writes res as an SVG plot to the file plot.
func writePlot(res *sweep.Result, plot, prog string, stdout, stderr io.Writer) int {
	f, err := os.Create(plot)
	if err == nil {
		title := "goroce against TCP, same run, " + res.Network
		if res.SameHost {
			title = "goroce (same-host path) against TCP, same run, " + res.Network
		}
		if res.Rounds > 1 {
			title += fmt.Sprintf(", medians of %d rounds", res.Rounds)
		}
		err = sweep.WritePlot(f, res, title)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: plot: %v\n", prog, err)
		return 1
	}
	fmt.Fprintf(stdout, "\n plot: %s\n", plot)
	return 0
}
