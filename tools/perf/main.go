// Command perf is goroce's performance laboratory: the measurements behind
// docs/PERFORMANCE.md that go beyond the one-run comparison of `goroce
// bench`.
//
//	go run ./tools/perf targets [-rounds N] [-samehost | -veth]   the performance targets between two processes, with verdicts
//	go run ./tools/perf sweep [-rounds N] [-plot FILE.svg]        sizes and QP counts, goroce against TCP: tables and a plot
//	go run ./tools/perf replot SWEEP.txt FILE.svg                 the plot of a saved sweep, without measuring
//	go run ./tools/perf floor [-n N] [-server | -client]          the kernel's floor under the 2-byte latency: a bare UDP ping-pong
//	go run ./tools/perf udpcost [-size N] [-gso N] [-first]       the kernel's UDP cost alone: sender CPU per datagram and per GiB
//	go run ./tools/perf vcpus [-n N]                              how far apart the host has put two vCPUs: a cache line's round trip
//
// tools/perf/README.md says what each measures and how to read it.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/goroce/goroce/tools/perf/internal/targets"
)

type command struct {
	name, usage, summary string
	run                  func(args []string, stdout, stderr io.Writer) int
}

var commands = []command{
	{"targets", "targets [-rounds N] [-samehost | -veth]", "the performance targets between two processes, with verdicts", runTargets},
	{"sweep", "sweep [-rounds N] [-plot FILE.svg]", "sizes and QP counts, goroce against TCP: tables and a plot", runSweep},
	{"replot", "replot SWEEP.txt FILE.svg", "the plot of a sweep's saved tables, without measuring", runReplot},
	{"floor", "floor [-n N] [-server | -client]", "the kernel's floor under the 2-byte latency: a bare UDP ping-pong", runFloor},
	{"udpcost", "udpcost [-size N] [-gso N] [-first]", "the kernel's UDP cost alone: sender CPU per datagram and per GiB", runUDPCost},
	{"vcpus", "vcpus [-n N] [-d DURATION]", "how far apart the host has put two vCPUs: a cache line's round trip", runVCPUs},
	{endCommand, "", "", targets.End}, // no usage: targets runs it itself
}

// endCommand runs one end of `perf targets` (targets.End) in a process
// that command started: the tool runs itself for each end.
const endCommand = "end"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "perf: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: go run ./tools/perf COMMAND [ARGS]  (COMMAND -h: its flags; tools/perf/README.md)\n\ncommands:")
	for _, c := range commands {
		if c.usage == "" {
			continue
		}
		fmt.Fprintf(w, "  %-42s %s\n", c.usage, c.summary)
	}
}
