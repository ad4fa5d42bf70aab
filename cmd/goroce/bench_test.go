package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

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
		{"-rounds", "0"}, {"-veth", "-addrs", "127.0.0.1,127.0.0.2"}, {"-veth", "-samehost"}, {"-rounds", "3", "-cpuprofile", "cpu.prof"}, {"-rounds", "2", "-trace", "t.out"}} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"bench"}, args...), &out, &errb); code != 2 {
			t.Errorf("bench %q: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}

// TestBenchLabFlags: the performance laboratory's flags are not goroce
// bench's; asked for one, it says which command of tools/perf runs it,
// and measures nothing.
func TestBenchLabFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		cmd  string
	}{
		{[]string{"-targets", "-rounds", "5"}, "targets"}, {[]string{"-n", "10", "--targets"}, "targets"}, {[]string{"-qps", "16"}, "targets"},
		{[]string{"-sweep"}, "sweep"}, {[]string{"-addrs", "127.0.0.1,127.0.0.2", "-max-size=4096"}, "sweep"}, {[]string{"-replot", "sweep.txt"}, "replot"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"bench"}, tc.args...), &out, &errb)
		want := "go run ./tools/perf " + tc.cmd + " -h"
		if code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), want) || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("bench %q: exit %d, stdout %q, stderr %q; want 2, nothing, one line naming %q", tc.args, code, out.String(), errb.String(), want)
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

// TestBenchVeth runs `goroce bench -veth`: both ends in two network
// namespaces made for the run, joined by a veth pair. The report must
// name the namespaces and carry figures for goroce, TCP and the UDP
// ceiling; the namespaces must be gone afterwards.
func TestBenchVeth(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	ip, err := netns.Tool("ip")
	if err != nil {
		t.Skip(err)
	}
	args := []string{"bench", "-veth", "-n", "300", "-s", "65536", "-lat-n", "100", "-counters"}
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("%q: exit %d: %s\n%s", args, code, errb.String(), out.String())
	}
	o := out.String()
	for _, w := range []string{"goroce bench: the server's end in network namespace /run/netns/goroce-bench-", "BW average[MiB/sec], 65536 B",
		"t_typical[usec], 2 B, one way", "UDP alone (GSO and GRO, no RDMA)", "counters of 198.18.9.1:", "counters of 198.18.9.2:"} {
		if !strings.Contains(o, w) {
			t.Errorf("%q: output lacks %q:\n%s", args, w, o)
		}
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
