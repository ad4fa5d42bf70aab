package targets

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/bench"
)

// tcpConns connects a client and a server TCP socket on loopback.
func tcpConns(t *testing.T) (c, s net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.5.30:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() { s, _ := ln.Accept(); acc <- s }()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 5, 31)}, Timeout: 5 * time.Second}
	if c, err = d.Dial("tcp", ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if s = <-acc; s == nil {
		c.Close()
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// TestSpinningPingPong: a ping-pong whose two readers poll their sockets
// exchanges every message and measures a latency, as the blocking one
// does.
func TestSpinningPingPong(t *testing.T) {
	c, s := tcpConns(t)
	sr, err := spinningReads(s)
	if err != nil {
		t.Fatal(err)
	}
	cr, err := spinningReads(c)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { bench.Echo(s, sr, 2); close(done) }()
	typical, err := bench.PingPong(c, cr, 2, 50)
	if err != nil || typical <= 0 {
		t.Fatalf("pingPong: %v µs, %v", typical, err)
	}
	c.Close()
	select {
	case <-done: // the echo's spinning read saw the end
	case <-time.After(10 * time.Second):
		t.Fatal("the spinning echo did not end with its connection")
	}
}

// TestSpinningReads: a spinning read waits for all the bytes it asks for,
// across writes, and ends with io.EOF when the peer closes before a
// message, io.ErrUnexpectedEOF within one.
func TestSpinningReads(t *testing.T) {
	c, s := tcpConns(t)
	read, err := spinningReads(s)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for _, w := range [][]byte{{1}, {2, 3}, {4}, {5}} {
			c.Write(w)
			time.Sleep(10 * time.Millisecond)
		}
		c.Close()
	}()
	b := make([]byte, 2)
	for _, want := range [][]byte{{1, 2}, {3, 4}} {
		if err := read(b); err != nil || b[0] != want[0] || b[1] != want[1] {
			t.Fatalf("read %v, %v; want %v", b, err, want)
		}
	}
	if err := read(b); !errors.Is(err, io.ErrUnexpectedEOF) || b[0] != 5 {
		t.Fatalf("read within the last message: %v, %v; want [5 …] and io.ErrUnexpectedEOF", b, err)
	}
	if err := read(b); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the end: %v, want io.EOF", err)
	}
}
