package perftest

import (
	"bytes"
	"io"
	"net"
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
