package pingpong

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFault runs a ping-pong of 64 KiB messages checked with -c while the
// client's device drops, reorders, duplicates and delays what it sends:
// the run must succeed, and the counters GOROCE_PRINT_COUNTERS prints must
// show that the faults happened and that the server saw their effects.
func TestFault(t *testing.T) {
	t.Setenv("GOROCE_PRINT_COUNTERS", "1")
	const size, iters = 65536, 200
	args := []string{"-c", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters)}
	srv, cli := pair(t, t.Context(), args,
		append([]string{"--fault", "drop=2%,reorder=25%,dup=1%,delay=1ms,seed=7"}, args...))
	if srv.code != 0 || cli.code != 0 {
		t.Fatalf("server exit %d: %s%s\nclient exit %d: %s%s", srv.code, srv.stdout, srv.stderr, cli.code, cli.stdout, cli.stderr)
	}
	s, c := parseOutput(t, "server", srv.stdout), parseOutput(t, "client", cli.stdout)
	checkPair(t, s, c, size, iters, "127.0.0.1", "127.0.0.2")
	sc, cc := parseCounters(t, "server", srv.stderr), parseCounters(t, "client", cli.stderr)
	for _, name := range []string{"fault_dropped", "fault_reordered", "fault_duplicated", "fault_delayed", "completer_retry_err"} {
		if cc[name] == 0 {
			t.Errorf("client %s = 0, want > 0", name)
		}
	}
	if sc["duplicate_request"] == 0 && sc["out_of_seq_request"] == 0 {
		t.Errorf("server saw no duplicate or out-of-sequence request: %v", sc)
	}
	if sc["fault_dropped"] != 0 || sc["rdma_recvs"] < iters || cc["rdma_sends"] != iters {
		t.Errorf("server fault_dropped %d rdma_recvs %d, client rdma_sends %d: want 0, ≥ %d, %d",
			sc["fault_dropped"], sc["rdma_recvs"], cc["rdma_sends"], iters, iters)
	}
	t.Logf("server: %s", strings.Split(srv.stdout, "\n")[3])
	t.Logf("client %s", strings.TrimSpace(cli.stderr))
	t.Logf("server %s", strings.TrimSpace(srv.stderr))
}

// TestFaultBadSpec checks that a bad --fault fails before any device is
// opened, with the parser's message.
func TestFaultBadSpec(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), "rc_pingpong", []string{"-d", "192.0.2.1", "--fault", "dup=1%,delay=soon"}, &stdout, &stderr)
	want := `rc_pingpong: invalid argument: --fault: link: bad fault configuration: "delay=soon"`
	if code != 1 || !strings.HasPrefix(stderr.String(), want) {
		t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), want)
	}
	if !strings.Contains(stdout.String(), "--fault=<spec>      inject faults into this process's packets: see\n                          docs/FAULT.md") {
		t.Errorf("usage does not document --fault:\n%s", stdout.String())
	}
}

// TestPrintCounters checks that GOROCE_PRINT_COUNTERS=1 prints the
// counters on a failed run too, and that without it nothing is printed.
func TestPrintCounters(t *testing.T) {
	for _, env := range []string{"1", ""} {
		t.Setenv("GOROCE_PRINT_COUNTERS", env)
		_, ch := start(t.Context(), "-d", "127.0.0.2", "-p", strconv.Itoa(int(freePort(t))), "127.0.0.1")
		r := await(t, "client", ch, 10*time.Second)
		if r.code != 1 || !strings.Contains(r.stderr, "reach server") {
			t.Fatalf("exit %d, stderr %q; want 1 and no server", r.code, r.stderr)
		}
		got := strings.Contains(r.stderr, "counters:")
		if got != (env == "1") {
			t.Fatalf("GOROCE_PRINT_COUNTERS=%q: stderr %q", env, r.stderr)
		}
		if env == "1" {
			c := parseCounters(t, "client", r.stderr)
			if _, ok := c["icrc_errors"]; !ok || len(c) < 20 {
				t.Errorf("counters %v: want icrc_errors and the rest", c)
			}
		}
	}
}
