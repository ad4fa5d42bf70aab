package netns_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStarvedReceiver streams RDMA WRITEs on 16 QPs into an ib_write_bw
// server that is stopped (SIGSTOP) three times for 200 ms, three ACK
// timeouts of the default timeout 14 (67 ms) and well inside the retry
// budget of retry_cnt 7: a host that does not run a process for that
// long is busy, not dead. While stopped the server reads nothing, its
// socket buffer overflows and the kernel drops what the QPs send; each
// QP times out and goes back. Every transfer must complete.
func TestStarvedReceiver(t *testing.T) {
	tp := newTopology(t, 9000)
	bin := buildTool(t, "ib_write_bw")
	runDir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	common := []string{"-p", exchangePort, "-q", "16", "-s", "65536", "-D", "4"}
	srv := startBin(t, ctx, tp, bin, "server", tp.a, runDir, append([]string{"-d", addrA}, common...)...)
	srv.waitReady(t, 30*time.Second)
	cli := startBin(t, ctx, tp, bin, "client", tp.b, runDir, append([]string{"-d", addrB}, append(common, addrA)...)...)
	stops := make(chan error, 1)
	go func() {
		time.Sleep(800 * time.Millisecond) // connected and streaming
		for range 3 {
			if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				stops <- err
				return
			}
			time.Sleep(200 * time.Millisecond)
			if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				stops <- err
				return
			}
			time.Sleep(600 * time.Millisecond)
		}
		stops <- nil
	}()
	cli.wait(t, 60*time.Second)
	if err := <-stops; err != nil {
		t.Fatalf("stopping the server: %v", err)
	}
	srv.wait(t, 30*time.Second)
	if srv.code() != 0 || cli.code() != 0 {
		t.Fatalf("server: %v\n%s%s\nclient: %v\n%s%s", srv.err, srv.stdout, srv.stderr, cli.err, cli.stdout, cli.stderr)
	}
	cc, _ := counters(t, cli)
	sc, _ := counters(t, srv)
	t.Logf("client: %s", lastLine(cli.stdout.String()))
	t.Logf("client counters: %v", cc)
	t.Logf("server counters: %v", sc)
	if cc["completer_retry_err"] == 0 {
		t.Errorf("client completer_retry_err 0: the stops caused no retransmission timeout")
	}
	if sc["socket_drops"] == 0 {
		t.Logf("server socket_drops 0: its buffer held what arrived while it was stopped")
	}
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
