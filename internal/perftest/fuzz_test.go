package perftest

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// streamConn is a net.Conn whose peer says only what r holds and which
// swallows whatever is written to it.
type streamConn struct{ r io.Reader }

func (c streamConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c streamConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c streamConn) Close() error                     { return nil }
func (c streamConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c streamConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c streamConn) SetDeadline(time.Time) error      { return nil }
func (c streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c streamConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzSession runs a test's whole out-of-band exchange against a peer
// that says anything (perftest trusts its peer; goroce must not crash or
// hang on a broken one): the recorded peers of the golden captures as
// seeds, both roles, with the RDMA side faked.
func FuzzSession(f *testing.F) {
	names := []string{"rc_write_64", "rc_read_5000", "rc_send_64", "rc_write_lat_64", "ud_send_64", "rc_atomic_fadd"}
	for i, name := range names {
		segs := oobStream(f, name)
		for _, client := range []bool{true, false} {
			var peer []byte
			for _, s := range segs {
				if s.fromClient != client {
					peer = append(peer, s.data...)
				}
			}
			f.Add(uint8(i), client, peer)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, client bool, peer []byte) {
		file := names[int(which)%len(names)] + ".server.txt"
		if client {
			file = names[int(which)%len(names)] + ".client.txt"
		}
		test, args := recordedArgs(t, file)
		if client {
			args = append(args, "peer")
		}
		p, err := Parse(test, args)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			done <- session(p, NewConn(streamConn{bytes.NewReader(peer)}, client), 3, "goroce_fuzz", io.Discard,
				func(int) (plane, int, error) { return &fakePlane{p: p}, 1, nil })
		}()
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			t.Fatalf("session with peer %q did not end", peer)
		}
	})
}

// FuzzParse parses arbitrary command lines (arguments separated by NUL
// bytes) for every tool: what it accepts must satisfy what the tests
// rely on, as perftest's own checks make sure of.
func FuzzParse(f *testing.F) {
	names := slices.Sorted(maps.Keys(Tools))
	for _, s := range []string{"-s\x0064\x00-n\x00100", "-a\x00-q\x004", "-D\x005\x00-f\x001", "-l\x004\x00-n\x00100\x00-Q\x002",
		"-c\x00UD\x00-s\x005000", "--rate_limit=10\x00--burst_size=4", "-b\x00-t\x00512", "-e\x00-R\x00host"} {
		f.Add(uint8(0), s)
		f.Add(uint8(3), s)
	}
	f.Fuzz(func(t *testing.T, which uint8, line string) {
		test := Tools[names[int(which)%len(names)]]
		args := strings.Split(line, "\x00")
		p, err := Parse(test, args)
		if err != nil {
			return
		}
		bad := func(format string, a ...any) {
			t.Helper()
			t.Fatalf("%s %q: %s (%+v)", test.Name(), args, fmt.Sprintf(format, a...), *p)
		}
		if p.QPs < 1 || p.TxDepth < 1 || p.RxDepth < 1 || p.CQMod < 1 || p.PostList < 1 {
			bad("a count below 1")
		}
		if p.CQMod > p.TxDepth {
			bad("CQ moderation %d above the send depth %d", p.CQMod, p.TxDepth)
		}
		if p.Duration == 0 && p.Iters < 1 {
			bad("no iterations")
		}
		if p.Duration == 0 && p.Iters%p.PostList != 0 {
			bad("iterations not a multiple of the post list")
		}
		if p.Kind == Lat && p.QPs != 1 {
			bad("a latency test on %d QPs", p.QPs)
		}
		for mtu := 256; mtu <= 4096; mtu *= 2 {
			sizes := p.sizes(mtu)
			if len(sizes) == 0 {
				bad("no message size at MTU %d", mtu)
			}
			for _, s := range sizes {
				if s < 1 {
					bad("message size %d at MTU %d", s, mtu)
				}
			}
		}
	})
}
