package netns_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// exchangePort is the TCP port of rc_pingpong's address exchange; each
// test has namespaces of its own, so any port is free.
const exchangePort = "18515"

// pair runs an rc_pingpong server in a and a client in b, each with the
// common arguments plus its own, and waits for both to exit; a server
// still running 10 s after its client is killed.
func pair(t testing.TB, ctx context.Context, tp *topology, common, srvArgs, cliArgs []string, within time.Duration) (srv, cli *proc) {
	t.Helper()
	return pairTool(t, ctx, tp, "rc_pingpong", common, srvArgs, cliArgs, within)
}

// pairTool is pair for the tool of that name: rc_pingpong or ud_pingpong.
func pairTool(t testing.TB, ctx context.Context, tp *topology, tool string, common, srvArgs, cliArgs []string, within time.Duration) (srv, cli *proc) {
	t.Helper()
	bin := buildTool(t, tool)
	runDir := t.TempDir()
	args := func(addr string, extra []string) []string {
		return append(append([]string{"-d", addr, "-p", exchangePort}, common...), extra...)
	}
	srv = startBin(t, ctx, tp, bin, "server", tp.a, runDir, args(addrA, srvArgs)...)
	srv.waitReady(t, 30*time.Second)
	cli = startBin(t, ctx, tp, bin, "client", tp.b, runDir, append(args(addrB, cliArgs), addrA)...)
	cli.wait(t, within)
	// A server whose client failed may still be waiting for it.
	select {
	case <-srv.done:
	case <-time.After(10 * time.Second):
		srv.kill(t)
		<-srv.done
	}
	return srv, cli
}

// checkRun checks that both sides of a run of iters messages of size bytes
// succeeded and agree, and returns their counters.
func checkRun(t testing.TB, srv, cli *proc, size, iters int) (sc, cc map[string]uint64) {
	t.Helper()
	if srv.code() != 0 || cli.code() != 0 {
		t.Fatalf("server: %v\n%s%s\nclient: %v\n%s%s", srv.err, srv.stdout, srv.stderr, cli.err, cli.stdout, cli.stderr)
	}
	sr, cr := parseRun(t, srv, addrA, addrB), parseRun(t, cli, addrB, addrA)
	for _, r := range []report{sr, cr} {
		if r.bytes != 2*int64(size)*int64(iters) || r.iters != iters || r.seconds <= 0 {
			t.Errorf("result %+v: want %d bytes, %d iters, a time", r, 2*int64(size)*int64(iters), iters)
		}
	}
	var srest, crest string
	sc, srest = counters(t, srv)
	cc, crest = counters(t, cli)
	if srest != "" || crest != "" {
		t.Errorf("stderr besides the counters: server %q, client %q", srest, crest)
	}
	for _, c := range []map[string]uint64{sc, cc} {
		if c["rdma_sends"] != uint64(iters) || c["rdma_recvs"] != uint64(iters) {
			t.Errorf("rdma_sends %d, rdma_recvs %d; want %d each", c["rdma_sends"], c["rdma_recvs"], iters)
		}
	}
	t.Logf("%s", strings.Split(cli.stdout.String(), "\n")[2])
	return sc, cc
}

// TestPingpong runs rc_pingpong -c with 1 MiB messages between the
// namespaces: at veth MTU 9000 the active MTU is 4096, at 1500 it is 1024,
// and a path MTU above it is refused.
func TestPingpong(t *testing.T) {
	const size, iters = 1 << 20, 200
	for _, tc := range []struct {
		name      string
		mtu       int
		pathMTU   string // -m
		tooLarge  string // a -m above the active MTU, or ""
		activeMTU string
	}{
		{"mtu9000", 9000, "4096", "", "4096"},
		{"mtu1500", 1500, "1024", "2048", "1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTopology(t, tc.mtu)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			t0 := time.Now()
			common := []string{"-m", tc.pathMTU, "-c", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters)}
			srv, cli := pair(t, ctx, tp, common, nil, nil, 45*time.Second)
			sc, cc := checkRun(t, srv, cli, size, iters)
			// Each message is ⌈size/MTU⌉ packets.
			mtu, _ := strconv.Atoi(tc.pathMTU)
			if least := uint64(iters * ((size + mtu - 1) / mtu)); sc["rcvd_pkts"] < least || cc["rcvd_pkts"] < least {
				t.Errorf("rcvd_pkts: server %d, client %d; want at least %d", sc["rcvd_pkts"], cc["rcvd_pkts"], least)
			}
			for _, c := range []map[string]uint64{sc, cc} {
				if c["icrc_errors"] != 0 || c["malformed"] != 0 || c["retry_exceeded_err"] != 0 {
					t.Errorf("counters %v: want no ICRC errors, malformed packets or retry failures", c)
				}
			}
			t.Logf("wall time %v", time.Since(t0).Round(time.Millisecond))

			if tc.tooLarge == "" {
				return
			}
			common = []string{"-m", tc.tooLarge, "-n", "1"}
			srv, cli = pair(t, ctx, tp, common, nil, nil, 30*time.Second)
			want := "must be an IB MTU no larger than the port's active MTU " + tc.activeMTU
			if srv.code() != 1 || !strings.Contains(srv.stderr.String(), want) || cli.code() != 1 {
				t.Errorf("-m %s at MTU %d: server exit %d, stderr %q; client exit %d, stderr %q; want both 1 and the server to say %q",
					tc.tooLarge, tc.mtu, srv.code(), srv.stderr, cli.code(), cli.stderr, want)
			}
			_, msg := counters(t, srv)
			t.Logf("-m %s refused: %s", tc.tooLarge, strings.TrimSpace(msg))
		})
	}
}

// TestPingpongFaults runs rc_pingpong -c with 1 MiB messages while nftables
// in both namespaces drops, corrupts and CE-marks RoCEv2 packets on their
// way out (nftRules), and the client's own fault stage reorders,
// duplicates and delays what it sends. Both sides must succeed; every rule
// must have fired; the corrupted packets must have reached goroce and
// failed its ICRC check, not the kernel's UDP checksum check. The client,
// whose fault stage sends plain datagrams, sends IPv4 with UDP checksum 0,
// as rxe does; the server sends with UDP GSO, which needs checksums.
func TestPingpongFaults(t *testing.T) {
	// 100 round trips take 10-20 s on two CPUs: every packet the client's
	// fault stage reorders costs a go-back-N retransmission of the rest of
	// the message.
	const size, iters = 1 << 20, 100
	const fault = "reorder=25%,dup=1%,delay=1ms,seed=7"
	tp := newTopology(t, 9000)
	tp.addRules(t, tp.a)
	tp.addRules(t, tp.b)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Second)
	defer cancel()
	t0 := time.Now()
	common := []string{"-m", "4096", "-c", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters)}
	srv, cli := pair(t, ctx, tp, common, nil, []string{"--fault", fault}, 90*time.Second)
	sc, cc := checkRun(t, srv, cli, size, iters)
	t.Logf("wall time %v", time.Since(t0).Round(time.Millisecond))

	na, nb := tp.nftCounters(t, tp.a), tp.nftCounters(t, tp.b)
	t.Logf("nft in a (server → client): %v", na)
	t.Logf("nft in b (client → server): %v", nb)
	t.Logf("server counters: %v", sc)
	t.Logf("client counters: %v", cc)
	for _, x := range []struct {
		ns string
		c  map[string]uint64
	}{{"a", na}, {"b", nb}} {
		for _, rule := range []string{"all", "drop", "corrupt", "ce"} {
			if x.c[rule] == 0 {
				t.Errorf("nft rule %q in %s never fired: %v", rule, x.ns, x.c)
			}
		}
		if x.ns == "b" && x.c["checksummed"] != 0 {
			t.Errorf("%d of %d RoCEv2 packets left %s with a UDP checksum; want 0 on IPv4, as rxe sends", x.c["checksummed"], x.c["all"], x.ns)
		}
	}
	// A packet nft corrupted is counted by the receiver's ICRC check,
	// unless its byte 12 was 0x55 already.
	for _, x := range []struct {
		who       string
		icrc      uint64
		corrupted uint64
	}{{"server", sc["icrc_errors"], nb["corrupt"]}, {"client", cc["icrc_errors"], na["corrupt"]}} {
		if x.icrc == 0 || x.icrc > x.corrupted {
			t.Errorf("%s: icrc_errors %d for %d packets nft corrupted on the way to it; want 1..%d", x.who, x.icrc, x.corrupted, x.corrupted)
		}
	}
	for _, ns := range []string{tp.a, tp.b} {
		if s := tp.udpStats(t, ns); s["InCsumErrors"] != 0 {
			t.Errorf("the kernel in %s dropped %d datagrams for a bad UDP checksum; want 0: %v", ns, s["InCsumErrors"], s)
		}
	}
	if cc["fault_reordered"] == 0 || cc["fault_duplicated"] == 0 || cc["fault_delayed"] == 0 {
		t.Errorf("client's fault stage did not act: %v", cc)
	}
	if cc["completer_retry_err"] == 0 || sc["out_of_seq_request"] == 0 {
		t.Errorf("no recovery seen: client completer_retry_err %d, server out_of_seq_request %d", cc["completer_retry_err"], sc["out_of_seq_request"])
	}
}

// TestPeerKilled kills the server with SIGKILL in the middle of a long run
// of 1 MiB messages. The client must fail soon after, with an error that
// names the failure: RETRY_EXC_ERR once its SEND has been retried
// RetryCnt (7) times at 4.096 µs × 2^14 = 67 ms, about 0.54 s. If the kill
// lands after the server acknowledged the client's SEND but before its own
// reply arrived, the client has nothing outstanding that could time out
// (RC has no keepalive); then its --timeout, 1 s here, reports the silent
// peer. Either way it must exit within 3 s.
func TestPeerKilled(t *testing.T) {
	tp := newTopology(t, 9000)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	runDir := t.TempDir()
	common := []string{"-p", exchangePort, "-m", "4096", "-s", strconv.Itoa(1 << 20), "-n", "100000"}
	srv := start(t, ctx, tp, "server", tp.a, runDir, append([]string{"-d", addrA}, common...)...)
	srv.waitReady(t, 30*time.Second)
	cli := start(t, ctx, tp, "client", tp.b, runDir, append([]string{"-d", addrB, "--timeout=1s"}, append(common, addrA)...)...)
	cli.waitReady(t, 30*time.Second)
	time.Sleep(time.Second)
	select {
	case <-srv.done:
		t.Fatalf("server exited before the kill: %v\n%s%s", srv.err, srv.stdout, srv.stderr)
	case <-cli.done:
		t.Fatalf("client exited before the kill: %v\n%s%s", cli.err, cli.stdout, cli.stderr)
	default:
	}
	srv.kill(t)
	t0 := time.Now()
	code := cli.wait(t, 10*time.Second)
	took := cli.exited.Sub(t0)
	srv.wait(t, 10*time.Second)

	c, msg := counters(t, cli)
	t.Logf("client exited %d after %v: %s", code, took.Round(time.Millisecond), strings.TrimSpace(msg))
	if code != 1 {
		t.Errorf("client exit %d, want 1", code)
	}
	if took > 3*time.Second {
		t.Errorf("client took %v to fail, want < 3s", took)
	}
	switch {
	case strings.Contains(msg, "failed: RETRY_EXC_ERR (12)"):
		if c["retry_exceeded_err"] != 1 || c["completer_retry_err"] != 7 {
			t.Errorf("retry_exceeded_err %d, completer_retry_err %d; want 1 and 7 (RetryCnt)", c["retry_exceeded_err"], c["completer_retry_err"])
		}
		if took < 400*time.Millisecond {
			t.Errorf("RETRY_EXC_ERR after %v; want 8 timeouts of 67 ms", took)
		}
	case strings.Contains(msg, "timed out: no completion for 1s") && strings.Contains(msg, "is the peer gone?"):
		t.Logf("the client had no SEND outstanding when the server died; its --timeout caught it")
	default:
		t.Errorf("client stderr %q: want RETRY_EXC_ERR, or the --timeout message", msg)
	}
	if !strings.Contains(cli.stdout.String(), "remote address: ") {
		t.Errorf("client never connected:\n%s", cli.stdout)
	}
}

// udLocalLine is ud_pingpong's local address line, with its colon.
var udLocalLine = regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}: GID `)

// TestUDPingpong runs ud_pingpong -c between the namespaces with
// datagrams of the port's active MTU: 1024 bytes at veth MTU 1500, 4096
// at 9000; one byte more is refused before the exchange.
func TestUDPingpong(t *testing.T) {
	const iters = 2000
	for _, tc := range []struct {
		name      string
		mtu, size int
	}{{"mtu1500", 1500, 1024}, {"mtu9000", 9000, 4096}} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTopology(t, tc.mtu)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			t0 := time.Now()
			common := []string{"-c", "-s", strconv.Itoa(tc.size), "-n", strconv.Itoa(iters)}
			srv, cli := pairTool(t, ctx, tp, "ud_pingpong", common, nil, nil, 45*time.Second)
			sc, cc := checkRun(t, srv, cli, tc.size, iters)
			for _, x := range []struct {
				p *proc
				c map[string]uint64
			}{{srv, sc}, {cli, cc}} {
				if !udLocalLine.MatchString(x.p.stdout.String()) {
					t.Errorf("%s's local address line lacks ud_pingpong's \": GID\":\n%s", x.p.name, x.p.stdout)
				}
				// Each message is one datagram, and none is lost. (sent_pkts
				// may lag by the last one: a UD SEND completes when its
				// packet is queued, before the counter sees it written.)
				if x.c["rcvd_pkts"] != iters || x.c["icrc_errors"] != 0 {
					t.Errorf("%s counters %v: want %d packets received, one per message, and no ICRC errors", x.p.name, x.c, iters)
				}
			}
			t.Logf("wall time %v", time.Since(t0).Round(time.Millisecond))

			big := startBin(t, ctx, tp, buildTool(t, "ud_pingpong"), "server", tp.a, t.TempDir(),
				"-d", addrA, "-p", exchangePort, "-s", strconv.Itoa(tc.size+1))
			code := big.wait(t, 30*time.Second)
			want := "larger than the port's active MTU " + strconv.Itoa(tc.size)
			if code != 1 || !strings.Contains(big.stderr.String(), want) || big.stdout.String() != "" {
				t.Errorf("-s %d at MTU %d: exit %d, stdout %q, stderr %q; want 1, nothing, %q", tc.size+1, tc.mtu, code, big.stdout, big.stderr, want)
			}
		})
	}
}
