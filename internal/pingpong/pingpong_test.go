package pingpong

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/syncbuf"
	"github.com/goroce/goroce/verbs"
)

// result is what one run returned.
type result struct {
	code           int
	stdout, stderr string
}

// start runs rc_pingpong with args in a goroutine; wait for the result on
// the channel. The returned buffer is its stdout.
func start(ctx context.Context, args ...string) (*syncbuf.Buffer, <-chan result) {
	return startKind(ctx, verbs.QPTypeRC, args...)
}

// startKind is start for the tool of kind: rc_pingpong, uc_pingpong or
// ud_pingpong.
func startKind(ctx context.Context, kind Kind, args ...string) (*syncbuf.Buffer, <-chan result) {
	out, errs := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	ch := make(chan result, 1)
	go func() {
		code := Run(ctx, kind, toolName(kind), args, out, errs)
		ch <- result{code, out.String(), errs.String()}
	}()
	return out, ch
}

// toolName is the name of the tool for kind.
func toolName(kind Kind) string {
	return map[Kind]string{verbs.QPTypeRC: "rc_pingpong", verbs.QPTypeUC: "uc_pingpong", verbs.QPTypeUD: "ud_pingpong"}[kind]
}

func await(t *testing.T, who string, ch <-chan result, within time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("%s still running after %v", who, within)
		return result{}
	}
}

// pair runs an rc_pingpong server on 127.0.0.1 and a client on 127.0.0.2.
func pair(t *testing.T, ctx context.Context, srvArgs, cliArgs []string) (srv, cli result) {
	t.Helper()
	return pairKind(t, ctx, verbs.QPTypeRC, srvArgs, cliArgs)
}

// pairKind is pair for the tool of kind.
func pairKind(t *testing.T, ctx context.Context, kind Kind, srvArgs, cliArgs []string) (srv, cli result) {
	t.Helper()
	port := fmt.Sprint(freePort(t))
	out, srvCh := startKind(ctx, kind, append([]string{"-d", "127.0.0.1", "-p", port}, srvArgs...)...)
	select {
	case <-out.Ready():
	case r := <-srvCh:
		t.Fatalf("server exited with %d before listening: %s", r.code, r.stderr)
	}
	_, cliCh := startKind(ctx, kind, append([]string{"--ib-dev=127.0.0.2", "--port", port}, append(cliArgs, "127.0.0.1")...)...)
	cli = await(t, "client", cliCh, 2*time.Minute)
	srv = await(t, "server", srvCh, 2*time.Minute)
	return srv, cli
}

func TestInProcess(t *testing.T) {
	base := runtime.NumGoroutine()
	for _, tc := range []struct {
		name     string
		srv, cli []string
		size     int
		iters    int
	}{
		{"poll", []string{"-s", "4096", "-n", "200", "-c"}, []string{"--size=4096", "--iters", "200", "--chk"}, 4096, 200},
		{"events", []string{"-e", "-s4096", "-n200", "-c", "-r", "16"}, []string{"-ecs", "4096", "-n", "200", "--rx-depth=16"}, 4096, 200},
		{"mtu4096 odd size", []string{"-m", "4096", "-s", "10001", "-n", "50", "-c"}, []string{"-m4096", "-s", "10001", "-n", "50", "-c"}, 10001, 50},
		{"new_send tiny", []string{"-N", "-s", "1", "-n", "100", "-r", "2"}, []string{"--new_send", "-s", "1", "-n", "100", "-r", "2"}, 1, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli := pair(t, t.Context(), tc.srv, tc.cli)
			if srv.code != 0 || cli.code != 0 {
				t.Fatalf("server exit %d: %s%s\nclient exit %d: %s%s", srv.code, srv.stdout, srv.stderr, cli.code, cli.stdout, cli.stderr)
			}
			s, c := parseOutput(t, "server", srv.stdout), parseOutput(t, "client", cli.stdout)
			checkPair(t, s, c, tc.size, tc.iters, "127.0.0.1", "127.0.0.2")
			if s.localSep != ", " || c.localSep != ", " {
				t.Errorf("local address lines %q, %q: want \", GID\" as rc_pingpong prints", srv.stdout, cli.stdout)
			}
			t.Logf("server: %s", strings.Split(srv.stdout, "\n")[3])
		})
	}
	checkGoroutines(t, base)
}

// TestInProcessUD runs ud_pingpong's server and client in this process:
// messages up to the loopback port's active MTU (4096), checked with -c,
// polling and with events, at the default size and at sizes of 0 and 1.
func TestInProcessUD(t *testing.T) {
	base := runtime.NumGoroutine()
	for _, tc := range []struct {
		name     string
		srv, cli []string
		size     int
		iters    int
	}{
		{"poll mtu", []string{"-s", "4096", "-n", "300", "-c"}, []string{"--size=4096", "--iters", "300", "--chk"}, 4096, 300},
		{"events", []string{"-e", "-s1000", "-n200", "-c", "-r", "16"}, []string{"-ecs", "1000", "-n", "200", "--rx-depth=16"}, 1000, 200},
		{"default size", []string{"-n", "100", "-c"}, []string{"-n", "100", "-c", "-l", "3"}, 1024, 100},
		{"tiny", []string{"-s", "1", "-n", "100", "-r", "2", "-c"}, []string{"-s", "1", "-n", "100", "-r", "2", "-c"}, 1, 100},
		{"empty", []string{"-s", "0", "-n", "20", "-c"}, []string{"-s", "0", "-n", "20", "-c"}, 0, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli := pairKind(t, t.Context(), verbs.QPTypeUD, tc.srv, tc.cli)
			if srv.code != 0 || cli.code != 0 {
				t.Fatalf("server exit %d: %s%s\nclient exit %d: %s%s", srv.code, srv.stdout, srv.stderr, cli.code, cli.stdout, cli.stderr)
			}
			s, c := parseOutput(t, "server", srv.stdout), parseOutput(t, "client", cli.stdout)
			checkPair(t, s, c, tc.size, tc.iters, "127.0.0.1", "127.0.0.2")
			if s.localSep != ": " || c.localSep != ": " {
				t.Errorf("local address lines %q, %q: want \": GID\" as ud_pingpong prints", srv.stdout, cli.stdout)
			}
			if srv.stderr != "" || cli.stderr != "" {
				t.Errorf("stderr: server %q, client %q", srv.stderr, cli.stderr)
			}
		})
	}
	checkGoroutines(t, base)
}

// TestUDSizeAboveMTU: ud_pingpong refuses a message longer than the
// port's active MTU before it listens, as rdma-core's tool does.
func TestUDSizeAboveMTU(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Run(t.Context(), verbs.QPTypeUD, "ud_pingpong", []string{"-d", "127.0.0.1", "-s", "4097", "-p", fmt.Sprint(freePort(t))}, &stdout, &stderr)
	const want = "ud_pingpong: requested size 4097 is larger than the port's active MTU 4096: a UD message is one packet\n"
	if code != 1 || stdout.Len() != 0 || stderr.String() != want {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 1, nothing, %q", code, stdout.String(), stderr.String(), want)
	}
}

// TestPeerGone cancels the client in the middle of a long run: the server
// must fail, within its timeout, instead of waiting for ever. On RC its
// SEND may exhaust its retries first; on UD only the timeout can tell.
func TestPeerGone(t *testing.T) {
	for _, kind := range []Kind{verbs.QPTypeRC, verbs.QPTypeUD} {
		t.Run(toolName(kind), func(t *testing.T) { peerGone(t, kind) })
	}
}

func peerGone(t *testing.T, kind Kind) {
	base := runtime.NumGoroutine()
	port := fmt.Sprint(freePort(t))
	out, srvCh := startKind(t.Context(), kind, "-d", "127.0.0.1", "-p", port, "-n", "1000000", "--timeout=2s")
	<-out.Ready()
	ctx, cancel := context.WithCancel(t.Context())
	cliOut, cliCh := startKind(ctx, kind, "-d", "127.0.0.2", "-p", port, "-n", "1000000", "127.0.0.1")
	<-cliOut.Ready()
	time.Sleep(300 * time.Millisecond)
	cancel()
	cli := await(t, "client", cliCh, 10*time.Second)
	t0 := time.Now()
	srv := await(t, "server", srvCh, 10*time.Second)
	if cli.code == 0 || srv.code == 0 {
		t.Fatalf("client exit %d (%s), server exit %d (%s): want both to fail", cli.code, cli.stderr, srv.code, srv.stderr)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("server took %v to notice", d)
	}
	if !strings.Contains(srv.stderr, "RETRY_EXC_ERR") && !strings.Contains(srv.stderr, "no completion") ||
		kind == verbs.QPTypeUD && !strings.Contains(srv.stderr, "no completion") {
		t.Errorf("server stderr %q: want a retry or timeout error", srv.stderr)
	}
	t.Logf("server: %s", strings.TrimSpace(srv.stderr))
	checkGoroutines(t, base)
}

// TestExchangeFailures has the server face clients that break the
// out-of-band protocol, and a client face no server.
func TestExchangeFailures(t *testing.T) {
	for _, tc := range []struct {
		name, send, want string
	}{
		{"silent", "", "timeout"},
		{"garbage", strings.Repeat("x", msgLen), "malformed address message"},
		{"hangs up", "0000:0000", "read remote address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			out, srvCh := start(t.Context(), "-d", "127.0.0.1", "-p", fmt.Sprint(port), "--timeout", "300ms")
			<-out.Ready()
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte(tc.send))
			if tc.name == "hangs up" {
				c.Close()
			}
			defer c.Close()
			r := await(t, "server", srvCh, 5*time.Second)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("server exit %d, stderr %q; want 1 and %q", r.code, r.stderr, tc.want)
			}
		})
	}
	t.Run("no server", func(t *testing.T) {
		_, ch := start(t.Context(), "-d", "127.0.0.2", "-p", fmt.Sprint(freePort(t)), "127.0.0.1")
		r := await(t, "client", ch, 10*time.Second)
		if r.code != 1 || !strings.Contains(r.stderr, "reach server 127.0.0.1:") {
			t.Fatalf("client exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// checkGoroutines waits for the goroutines the runs started to end.
func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCheck(t *testing.T) {
	const size = 3*4096 + 5
	newP := func() *pingpong {
		p := &pingpong{size: size, chk: true, want: make([]byte, size), recvBuf: make([]byte, size)}
		fillPattern(p.want)
		return p
	}
	ok := &verbs.WC{Status: verbs.WCSuccess, WRID: recvWRID, ByteLen: size}
	for _, tc := range []struct {
		name string
		wc   *verbs.WC
		fill func(b []byte)
		want string // "" for success
	}{
		{"pattern", ok, func(b []byte) { fillPattern(b) }, ""},
		{"rdma-core without -c", ok, func(b []byte) { fillByte(b, 0x7b) }, ""},
		{"rdma-core with -c", ok, func(b []byte) {
			fillByte(b, 0x7b)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 0
			}
		}, ""},
		{"one byte flipped", ok, func(b []byte) { fillPattern(b); b[5000] ^= 1 }, "byte 5000 of 12293"},
		{"never arrived", ok, poison, "invalid data in message 1"},
		{"packets swapped", ok, func(b []byte) {
			fillPattern(b)
			var tmp [1024]byte
			copy(tmp[:], b[1024:2048])
			copy(b[1024:2048], b[2048:3072])
			copy(b[2048:3072], tmp[:])
		}, "invalid data"},
		{"short", &verbs.WC{Status: verbs.WCSuccess, WRID: recvWRID, ByteLen: size - 1}, fillPattern, "has 12292 bytes, want 12293"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newP()
			tc.fill(p.recvBuf)
			err := p.check(tc.wc)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("check: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("check = %v, want an error containing %q", err, tc.want)
			case err == nil && !bytes.Equal(p.recvBuf, bytes.Repeat([]byte{0xa5}, size)):
				t.Fatal("receive buffer not poisoned after the check")
			}
		})
	}
}

func fillByte(b []byte, c byte) {
	for i := range b {
		b[i] = c
	}
}
