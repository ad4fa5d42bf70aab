package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/goroce/goroce/tools/perf/internal/cpus"
)

// runVCPUs is `perf vcpus`: a cache line's round trip between the first
// two CPUs this process may run on, measured again and again, which says
// how far apart the host has put two vCPUs while it runs. targets and
// sweep print the same probe around their rounds.
func runVCPUs(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vcpus", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 10, "probes")
	d := fs.Duration("d", 50*time.Millisecond, "how long each probe runs (its figure is the mean round trip)")
	every := fs.Duration("every", time.Second, "the time from one probe's start to the next one's")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./tools/perf vcpus [-n N] [-d DURATION] [-every DURATION]")
		fmt.Fprintln(stderr, "\nTimes a cache line's round trip between the first two CPUs this process may run on, n times: how far apart")
		fmt.Fprintln(stderr, "the host has put two vCPUs. A host may move them for stretches of seconds to minutes.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || *n < 1 || *d <= 0 || *every < 0 {
		fs.Usage()
		return 2
	}
	var rts []float64
	start := time.Now()
	for i := range *n {
		if i > 0 {
			time.Sleep(time.Until(start.Add(time.Duration(i) * *every)))
		}
		rt := cpus.LineRoundTrip(*d)
		if rt == 0 {
			fmt.Fprintln(stderr, "perf vcpus: this process may run on fewer than two CPUs (or GOMAXPROCS is 1): nothing to measure between")
			return 1
		}
		rts = append(rts, float64(rt.Nanoseconds()))
		fmt.Fprintf(stdout, " %6.1f s  cache line between the two CPUs and back: %d ns\n", time.Since(start).Seconds(), rt.Nanoseconds())
	}
	slices.Sort(rts)
	fmt.Fprintf(stdout, " %d probes: %.0f ns median, %.0f–%.0f ns\n", len(rts), rts[len(rts)/2], rts[0], rts[len(rts)-1])
	return 0
}
