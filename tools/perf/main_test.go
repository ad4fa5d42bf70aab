package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/tools/perf/internal/sweep"
)

// TestMain lets this test binary run as the tool's endCommand: `perf
// targets` starts its ends as os.Executable, here the test binary. With
// runAsTool set in its environment it runs as the tool itself.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == endCommand || os.Getenv(runAsTool) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// runAsTool names the variable that has this test binary run as the tool.
const runAsTool = "GOROCE_PERF_TEST_TOOL"

// TestFlags: flags that do not fit fail with exit status 2, measuring
// nothing.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{}, {"nothing"}, {"targets", "extra"}, {"targets", "-q", "4"}, {"targets", "-qps", "16,0"}, {"targets", "-qps", ""}, {"targets", "-rate-n", "0"},
		{"targets", "-rounds", "0"}, {"targets", "-n", "0"}, {"targets", "-lat-n", "-1"}, {"targets", "-addrs", "127.0.0.1"},
		{"targets", "-veth", "-samehost"}, {"targets", "-veth", "-addrs", "127.0.0.1,127.0.0.2"},
		{"sweep", "-rounds", "0"}, {"sweep", "-op", "atomic"}, {"sweep", "-max-size", "1"}, {"sweep", "-veth", "-samehost"}, {"sweep", "extra"},
		{"replot"}, {"replot", "sweep.txt"}, {"replot", "a", "b", "c"},
		{"floor", "-server", "-client"}, {"floor", "-n", "0"}, {"floor", "-local", "nowhere"}, {"floor", "extra"}, {"udpcost", "extra"}, {"udpcost", "-size"},
		{"vcpus", "-n", "0"}, {"vcpus", "-d", "0s"}, {"vcpus", "extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, want 2 and nothing (%s)", args, code, out.String(), errb.String())
		}
	}
	for _, args := range [][]string{{"-h"}, {"targets", "-h"}, {"sweep", "-h"}, {"replot", "-h"}, {"floor", "-h"}, {"udpcost", "-h"}, {"vcpus", "-h"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 || !strings.Contains(errb.String(), "usage: go run ./tools/perf") {
			t.Errorf("%q: exit %d, stderr %q; want 0 and the usage", args, code, errb.String())
		}
	}
}

// TestTargets runs `perf targets` small: each end in its own process
// (this test binary run as endCommand), goroce's tools and TCP's ends, two
// rounds, and a summary row with a verdict for every target.
func TestTargets(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"targets", "-rounds", "2", "-s", "16384", "-n", "400", "-lat-n", "200", "-rate-n", "4000", "-qps", "2,4",
		"-addrs", "127.0.5.16,127.0.5.17"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	o := out.String()
	if !strings.Contains(o, "goroce over UDP (127.0.5.16, 127.0.5.17) against TCP between two Go processes, loopback, 2 rounds") ||
		!strings.Contains(o, " round 2 of 2: 16384 B ") {
		t.Errorf("no header or no second round:\n%s", o)
	}
	if strings.Contains(strings.ToLower(o), "issue") {
		t.Errorf("the report names an issue; it should say what it measures:\n%s", o)
	}
	i := strings.Index(o, "2 rounds: medians (min–max)")
	if i < 0 {
		t.Fatalf("no summary:\n%s", o)
	}
	rows := 0
	for _, line := range strings.Split(o[i:], "\n") {
		for _, name := range []string{"ib_write_bw 16384 B, 1 QP", "CPU seconds per GB", "ib_write_lat 2 B", "ib_write_bw 64 B", "ib_write_bw 16384 B, 2 QPs", "ib_write_bw 16384 B, 4 QPs"} {
			if !strings.HasPrefix(line, " "+name) {
				continue
			}
			rows++
			if !strings.HasSuffix(line, " met") && !strings.HasSuffix(line, "x short") {
				t.Errorf("row %q has no verdict", line)
			}
			if strings.Contains(line, "NaN") || strings.Contains(line, "Inf") || strings.Contains(line, " 0.00 (") {
				t.Errorf("row %q lacks a figure", line)
			}
		}
	}
	if rows != 6 {
		t.Errorf("%d target rows, want 6:\n%s", rows, o[i:])
	}
	// The references beside the latency target: TCP's spinning
	// ping-pong and the kernel's floor, goroce's datagram between two
	// bare processes. (The note of goroce's own part under the floor
	// shows only where goroce took longer than the floor, which a race
	// build on a busy machine need not: TestPrintTargets checks it.)
	for _, ref := range []string{"  the same, TCP's readers spinning ", "  the same, bare UDP (kernel's floor) "} {
		if !strings.Contains(o[i:], "\n "+ref) {
			t.Errorf("summary lacks %q:\n%s", ref, o[i:])
		}
	}
}

// TestSweep runs a small sweep and checks its three tables and plot, and
// that replot draws the plot again from the tables it printed.
func TestSweep(t *testing.T) {
	dir := t.TempDir()
	plot := dir + "/sweep.svg"
	var out, errb bytes.Buffer
	code := run([]string{"sweep", "-rounds", "2", "-max-size", "4096", "-max-qps", "4", "-bytes", "1048576", "-lat-n", "50",
		"-plot", plot, "-addrs", "127.0.5.12,127.0.5.13"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	o := out.String()
	for _, want := range []string{"Rounds: 2 per point", "Bandwidth against message size", "Latency against message size", "Aggregate bandwidth against QP count",
		" 4096       ", " 4          "} {
		if !strings.Contains(o, want) {
			t.Errorf("output lacks %q:\n%s", want, o)
		}
	}
	// The cache line's round trips between the CPUs, where there are two
	// to measure: a line per section, one before its first round and one
	// after each of the two; the tables parse back with them.
	if runtime.NumCPU() >= 2 {
		lines := regexp.MustCompile(`(?m)^ Cache line between the two CPUs and back: \d+ ns before the (bandwidth|latency|QP) points, \d+, \d+ ns after each round$`)
		if n := len(lines.FindAllString(o, -1)); n != 3 {
			t.Errorf("%d sections with their cache-line round trips, want 3:\n%s", n, o)
		}
	}
	if r, err := sweep.Parse(strings.NewReader(o)); err != nil || len(r.BWByQPs) != 3 {
		t.Errorf("the output does not parse back: %v", err)
	}
	svg, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(svg, []byte("<svg")) || bytes.Count(svg, []byte("<polyline")) != 6 || !bytes.Contains(svg, []byte("medians of 2 rounds")) {
		t.Errorf("plot: want an SVG with 6 series, its title naming the 2 rounds:\n%.300s", svg)
	}
	tables, replotted := dir+"/sweep.txt", dir+"/replot.svg"
	if err := os.WriteFile(tables, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run([]string{"replot", tables, replotted}, &out, &errb); code != 0 {
		t.Fatalf("replot: exit %d: %s", code, errb.String())
	}
	// The tables round the figures, so the lines may move by a pixel's
	// fraction; the series and the title are the same.
	again, err := os.ReadFile(replotted)
	if err != nil || bytes.Count(again, []byte("<polyline")) != 6 || !bytes.Contains(again, []byte("medians of 2 rounds")) {
		t.Errorf("replot: want the sweep's 6 series and its title: %v\n%.300s", err, again)
	}
}

// TestVeth runs a small `sweep -veth` and a small `targets -veth` (each
// end a process in its namespace): both ends in two network namespaces
// made for the run, joined by a veth pair. The reports must name the
// network and carry figures; the namespaces must be gone afterwards.
func TestVeth(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	ip, err := netns.Tool("ip")
	if err != nil {
		t.Skip(err)
	}
	plot := filepath.Join(t.TempDir(), "sweep.svg")
	for _, args := range [][]string{
		{"sweep", "-veth", "-veth-mtu", "1500", "-max-size", "4096", "-max-qps", "2", "-bytes", "1048576", "-lat-n", "50", "-plot", plot},
		{"targets", "-veth", "-s", "16384", "-n", "300", "-lat-n", "100", "-rate-n", "2000", "-qps", "2"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%q: exit %d: %s\n%s", args, code, errb.String(), out.String())
		}
		o := out.String()
		want := []string{"Network: veth between two namespaces, MTU 1500", "Aggregate bandwidth against QP count", " 4096       "}
		if args[0] == "targets" {
			want = []string{"goroce over UDP (198.18.9.1, 198.18.9.2) against TCP between two Go processes, veth between two namespaces, MTU 9000, 1 round",
				"ib_write_bw 16384 B, 1 QP [MiB/s]      ≥ 1.3x TCP", "ib_write_lat 2 B t_typical [usec]", "ib_write_bw 16384 B, 2 QPs [MiB/s]",
				"  the same, bare UDP (kernel's floor) "} // measured between the two namespaces too
		}
		for _, w := range want {
			if !strings.Contains(o, w) {
				t.Errorf("%q: output lacks %q:\n%s", args, w, o)
			}
		}
	}
	if svg, err := os.ReadFile(plot); err != nil || !bytes.Contains(svg, []byte("same run, veth between two namespaces, MTU 1500")) {
		t.Errorf("plot: want its title to name the veth pair: %v\n%.600s", err, svg)
	}
	list, err := exec.Command(ip, "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if prefix := fmt.Sprintf("goroce-perf-%d-", os.Getpid()); strings.Contains(string(list), prefix) {
		t.Errorf("namespaces left behind:\n%s", list)
	}
}

// TestFloor runs `perf floor` small, both ends in this process, and its
// two ends as two processes of this test binary: each prints the median
// one-way time of goroce's ping-pong datagram over bare UDP.
func TestFloor(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the floor is measured on Linux only")
	}
	var out, errb bytes.Buffer
	if code := run([]string{"floor", "-n", "300", "-v", "-local", "127.0.5.40", "-peer", "127.0.5.41"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	oneWay := regexp.MustCompile(`(?m)^56 bytes in 2 segment\(s\), 300 round trips: one way \d+\.\d\d us \(median\)\nmin `)
	if !oneWay.MatchString(out.String()) {
		t.Errorf("output:\n%s", out.String())
	}
	server := exec.Command(os.Args[0], "floor", "-server", "-n", "200", "-local", "127.0.5.42", "-port", "19791")
	var srvOut bytes.Buffer
	server.Env = append(os.Environ(), runAsTool+"=1")
	server.Stdout, server.Stderr = &srvOut, &srvOut
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	code := run([]string{"floor", "-client", "-segments", "1", "-n", "200", "-local", "127.0.5.43", "-peer", "127.0.5.42", "-port", "19791"}, &out, &errb)
	if err := server.Wait(); err != nil || code != 0 {
		t.Fatalf("client: exit %d: %s; server: %v: %s", code, errb.String(), err, srvOut.String())
	}
	if !strings.HasPrefix(out.String(), "36 bytes in 1 segment(s), 200 round trips: one way ") {
		t.Errorf("client's output: %q", out.String())
	}
}

// TestUDPCost runs `perf udpcost` for a moment: it reports the sender's
// CPU per datagram. It measures no speed.
func TestUDPCost(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the UDP cost is measured on Linux only")
	}
	var out, errb bytes.Buffer
	if code := run([]string{"udpcost", "-size", "4112", "-gso", "15", "-first", "-per", "1", "-t", "50ms"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "sender CPU: ") || !strings.Contains(out.String(), " us per datagram") {
		t.Errorf("output:\n%s", out.String())
	}
}

// TestVCPUs runs `perf vcpus` twice over: on two CPUs or more each probe
// prints its round trip and the summary follows; on one it says there is
// nothing to measure.
func TestVCPUs(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"vcpus", "-n", "2", "-d", "10ms", "-every", "20ms"}, &out, &errb)
	if runtime.NumCPU() < 2 || runtime.GOMAXPROCS(0) < 2 {
		if code != 1 || !strings.Contains(errb.String(), "fewer than two CPUs") {
			t.Errorf("one CPU: exit %d, %q", code, errb.String())
		}
		return
	}
	probes := regexp.MustCompile(`(?m)^ +\d+\.\d s  cache line between the two CPUs and back: \d+ ns\n`)
	if code != 0 || len(probes.FindAllString(out.String(), -1)) != 2 || !strings.Contains(out.String(), " 2 probes: ") {
		t.Errorf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
}
