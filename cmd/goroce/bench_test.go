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
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/bench"
	"github.com/goroce/goroce/internal/netns"
)

// TestMain lets this test binary run as goroce's endCommand: `goroce
// bench -targets` starts its ends as os.Executable, here the test binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == endCommand {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestBench runs `goroce bench` small: both perftest tables and the TCP
// comparison must come out, with numbers. The bandwidth test runs on one
// P (-procs 1), which the process has back afterwards.
func TestBench(t *testing.T) {
	var out, errb bytes.Buffer
	procs := runtime.GOMAXPROCS(0)
	code := run([]string{"bench", "-n", "200", "-s", "16384", "-lat-n", "200", "-procs", "1", "-addrs", "127.0.5.10,127.0.5.11"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS %d after the run, want %d back", got, procs)
	}
	o := out.String()
	for _, want := range []string{"RDMA_Write BW Test", "RDMA_Write Latency Test", " #bytes     #iterations    BW peak[MiB/sec]",
		" 16384      200 ", "t_typical[usec]", "BW average[MiB/sec], 16384 B", "t_typical[usec], 2 B, one way",
		"UDP alone (GSO and GRO, no RDMA), same bytes: "} {
		if !strings.Contains(o, want) {
			t.Errorf("output lacks %q:\n%s", want, o)
		}
	}
	for _, line := range strings.Split(o, "\n") {
		if strings.HasPrefix(line, " BW average") || strings.HasPrefix(line, " t_typical") {
			f := strings.Fields(line)
			if r := f[len(f)-1]; !strings.HasSuffix(r, "x") || r == "0.00x" || r == "NaNx" || r == "+Infx" {
				t.Errorf("ratio %q in %q", r, line)
			}
		}
	}
}

// TestBenchSameHost runs `goroce bench -samehost -counters -trace -poll`:
// the report says which path ran and that the waits poll, the counters
// show every goroce packet in shared memory, and the execution trace is
// written.
func TestBenchSameHost(t *testing.T) {
	t.Setenv("GOROCE_SAMEHOST", "") // the flag alone must turn the path on
	trace := filepath.Join(t.TempDir(), "trace.out")
	var out, errb bytes.Buffer
	code := run([]string{"bench", "-samehost", "-counters", "-trace", trace, "-poll", "-n", "200", "-s", "16384", "-lat-n", "200", "-addrs", "127.0.5.12,127.0.5.13"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	if b, err := os.ReadFile(trace); err != nil || !bytes.HasPrefix(b, []byte("go 1.")) {
		t.Errorf("-trace wrote no Go execution trace: %v, %.20q", err, b)
	}
	o := out.String()
	if !strings.Contains(o, "goroce over the same-host path (shared memory)") {
		t.Errorf("the report does not say the same-host path ran:\n%s", o)
	}
	if !strings.Contains(o, "busy-poll on both sides (-poll)") {
		t.Errorf("the report does not say the waits poll:\n%s", o)
	}
	devices := 0
	for _, line := range strings.Split(o, "\n") {
		if !strings.Contains(line, "counters of") {
			continue
		}
		devices++
		var sent, shm string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "sent_pkts="); ok {
				sent = v
			}
			if v, ok := strings.CutPrefix(f, "samehost_pkts="); ok {
				shm = v
			}
		}
		if sent == "" || sent != shm {
			t.Errorf("sent_pkts %q, samehost_pkts %q in %q", sent, shm, line)
		}
	}
	if devices != 2 {
		t.Errorf("counters of %d devices, want 2:\n%s", devices, o)
	}
}

func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{{"-op", "atomic"}, {"-addrs", "127.0.0.1"}, {"extra"}, {"-s"},
		{"-rounds", "0"}, {"-rounds", "0", "-sweep"}, {"-veth", "-addrs", "127.0.0.1,127.0.0.2"}, {"-veth", "-samehost"}, {"-rounds", "3", "-cpuprofile", "cpu.prof"}, {"-rounds", "2", "-trace", "t.out"},
		{"-targets", "-sweep"}, {"-targets", "-q", "4"}, {"-targets", "-qps", "16,0"}, {"-targets", "-qps", ""}, {"-targets", "-rate-n", "0"}, {"-targets", "-rounds", "0"}, {"-targets", "-n", "0"}, {"-targets", "-lat-n", "-1"},
		{"-targets", "-veth", "-samehost"}, {"-targets", "-veth", "-addrs", "127.0.0.1,127.0.0.2"}} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"bench"}, args...), &out, &errb); code != 2 {
			t.Errorf("bench %q: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}

// TestBenchRounds runs two small rounds and checks that each printed its
// comparison and that the summary of both follows.
func TestBenchRounds(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"bench", "-rounds", "2", "-n", "100", "-s", "16384", "-lat-n", "100", "-addrs", "127.0.5.14,127.0.5.15"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	o := out.String()
	if n := strings.Count(o, "TCP on the same addresses"); n != 2 {
		t.Errorf("%d comparisons, want 2:\n%s", n, o)
	}
	i := strings.Index(o, "2 rounds: medians (min–max)")
	if i < 0 || i < strings.LastIndex(o, "round 2 of 2") {
		t.Fatalf("no summary after the second round:\n%s", o)
	}
	for _, row := range []string{"BW average[MiB/sec], 16384 B", "t_typical[usec], 2 B, one way", "CPU seconds per GB (both ends)", "UDP alone"} {
		if !strings.Contains(o[i:], row) {
			t.Errorf("summary lacks %q:\n%s", row, o[i:])
		}
	}
}

// TestBenchTargets runs `goroce bench -targets` small: each end in its own
// process (this test binary run as endCommand), goroce's tools and TCP's
// ends, two rounds, and a summary row with a verdict for every target.
func TestBenchTargets(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"bench", "-targets", "-rounds", "2", "-s", "16384", "-n", "400", "-lat-n", "200", "-rate-n", "4000", "-qps", "2,4",
		"-addrs", "127.0.5.16,127.0.5.17"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errb.String(), out.String())
	}
	o := out.String()
	if !strings.Contains(o, "goroce over UDP (127.0.5.16, 127.0.5.17) against TCP between two Go processes, loopback, 2 rounds") ||
		!strings.Contains(o, " round 2 of 2: 16384 B ") {
		t.Errorf("no header or no second round:\n%s", o)
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

// TestBenchSweep runs a small sweep and checks its three tables and plot.
func TestBenchSweep(t *testing.T) {
	plot := t.TempDir() + "/sweep.svg"
	var out, errb bytes.Buffer
	code := run([]string{"bench", "-sweep", "-rounds", "2", "-max-size", "4096", "-max-qps", "4", "-bytes", "1048576", "-lat-n", "50",
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
	if r, err := bench.ParseSweep(strings.NewReader(o)); err != nil || len(r.BWByQPs) != 3 {
		t.Errorf("the output does not parse back: %v", err)
	}
	svg, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(svg, []byte("<svg")) || bytes.Count(svg, []byte("<polyline")) != 6 || !bytes.Contains(svg, []byte("medians of 2 rounds")) {
		t.Errorf("plot: want an SVG with 6 series, its title naming the 2 rounds:\n%.300s", svg)
	}
}

// TestBenchVeth runs `goroce bench -veth`, a small `-veth -sweep` and a
// small `-veth -targets` (each end a process in its namespace): both
// ends in two network namespaces made for the run, joined by a veth pair.
// The reports must name the namespaces and carry figures for goroce, TCP
// and the UDP ceiling; the namespaces must be gone afterwards.
func TestBenchVeth(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	ip, err := netns.Tool("ip")
	if err != nil {
		t.Skip(err)
	}
	plot := filepath.Join(t.TempDir(), "sweep.svg")
	for _, args := range [][]string{
		{"-veth", "-n", "300", "-s", "65536", "-lat-n", "100", "-counters"},
		{"-veth", "-veth-mtu", "1500", "-sweep", "-max-size", "4096", "-max-qps", "2", "-bytes", "1048576", "-lat-n", "50", "-plot", plot},
		{"-veth", "-targets", "-s", "16384", "-n", "300", "-lat-n", "100", "-rate-n", "2000", "-qps", "2"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"bench"}, args...), &out, &errb); code != 0 {
			t.Fatalf("bench %q: exit %d: %s\n%s", args, code, errb.String(), out.String())
		}
		o := out.String()
		want := []string{"goroce bench: the server's end in network namespace /run/netns/goroce-bench-", "BW average[MiB/sec], 65536 B",
			"t_typical[usec], 2 B, one way", "UDP alone (GSO and GRO, no RDMA)", "counters of 198.18.9.1:", "counters of 198.18.9.2:"}
		switch args[1] {
		case "-veth-mtu":
			want = []string{"Network: veth between two namespaces, MTU 1500", "Aggregate bandwidth against QP count", " 4096       "}
		case "-targets":
			want = []string{"goroce over UDP (198.18.9.1, 198.18.9.2) against TCP between two Go processes, veth between two namespaces, MTU 9000, 1 round",
				"ib_write_bw 16384 B, 1 QP [MiB/s]      ≥ 1.3x TCP", "ib_write_lat 2 B t_typical [usec]", "ib_write_bw 16384 B, 2 QPs [MiB/s]",
				"  the same, bare UDP (kernel's floor) "} // measured between the two namespaces too
		}
		for _, w := range want {
			if !strings.Contains(o, w) {
				t.Errorf("bench %q: output lacks %q:\n%s", args, w, o)
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
	if prefix := fmt.Sprintf("goroce-bench-%d-", os.Getpid()); strings.Contains(string(list), prefix) {
		t.Errorf("namespaces left behind:\n%s", list)
	}
}

// TestBenchVethSignal: `goroce bench -veth` ended by SIGTERM mid-run
// exits 130 and deletes its namespaces first. The bench runs in a child,
// this test binary run again with GOROCE_BENCH_VETH_CHILD set.
func TestBenchVethSignal(t *testing.T) {
	if os.Getenv("GOROCE_BENCH_VETH_CHILD") != "" {
		os.Exit(run([]string{"bench", "-veth", "-D", "30", "-no-lat"}, os.Stdout, os.Stderr))
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	ip, err := netns.Tool("ip")
	if err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchVethSignal$")
	cmd.Env = append(os.Environ(), "GOROCE_BENCH_VETH_CHILD=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("goroce-bench-%d-", cmd.Process.Pid)
	list := func() string {
		b, err := exec.Command(ip, "netns", "list").CombinedOutput()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// Wait for the namespaces, then for the bandwidth test to be under way.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(list(), prefix); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no namespaces %s* appeared:\n%s", prefix, out.String())
		}
	}
	time.Sleep(time.Second)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Errorf("exit %v, want 130:\n%s", err, out.String())
	}
	if l := list(); strings.Contains(l, prefix) {
		t.Errorf("namespaces left behind after SIGTERM:\n%s", l)
	}
}
