package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/goroce/goroce/tools/perf/internal/targets"
)

// runTargets is `perf targets`: goroce's perftest tools and TCP, each end
// in its own process, this program run again as endCommand (in the veth
// pair's namespaces with -veth, the server's in the first).
func runTargets(args []string, stdout, stderr io.Writer) int {
	const prog = "perf targets"
	fs := flag.NewFlagSet("targets", flag.ContinueOnError)
	fs.SetOutput(stderr)
	size := fs.Int("s", 65536, "the bandwidth tests' message size in bytes")
	iters := fs.Int("n", 40960, "messages of each bandwidth test in all, split over its QPs")
	latIters := fs.Int("lat-n", 20000, "ping-pongs of each latency test")
	rateIters := fs.Int("rate-n", 1_000_000, "64-byte messages of the message rate test")
	qpList := fs.String("qps", "16,256,1024", "the QP counts measured against one QP, comma-separated")
	rounds := fs.Int("rounds", 1, "measure everything this many times, goroce and TCP taking turns going first, and print the medians")
	nf := addNetworkFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./tools/perf targets [-rounds N] [-s SIZE] [-n MSGS] [-lat-n N] [-rate-n N] [-qps 16,256,1024] [-samehost] [-addrs A,B | -veth]")
		fmt.Fprintln(stderr, "\nMeasures goroce's performance targets between two processes, as a user runs the tools: goroce's perftest tools")
		fmt.Fprintln(stderr, "and TCP between two Go processes, each end in its own process, and the kernel's floor under the latency (a bare")
		fmt.Fprintln(stderr, "UDP ping-pong). Prints each round's figures, then each target's median, range and verdict.")
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
	qps, err := parseQPs(*qpList)
	if err == nil && (*rounds < 1 || *size < 1 || *rateIters < 1 || *iters < 1 || *latIters < 1) {
		err = fmt.Errorf("-rounds, -s, -n, -lat-n and -rate-n want positive numbers")
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 2
	}
	n, code := nf.open(fs, prog, stderr)
	if n == nil {
		return code
	}
	defer n.stop()
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
	cfg := targets.Config{
		Rounds: *rounds, SameHost: n.sameHost, Size: *size, Iters: *iters, LatIters: *latIters, RateIters: *rateIters, QPs: qps,
		Server: n.server, Client: n.client, Network: n.name, Veth: n.veth != nil,
		Command: func(server bool, args ...string) *exec.Cmd {
			args = append([]string{endCommand}, args...)
			if n.veth != nil {
				return n.veth.Command(!server, exe, args...)
			}
			return exec.Command(exe, args...)
		},
	}
	if _, err := targets.Run(cfg, stdout); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
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
