//go:build linux

package main

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	lo1 = netip.MustParseAddr("127.0.0.1")
	lo2 = netip.MustParseAddr("127.0.0.2")
)

// TestPair ping-pongs both shapes of datagram over loopback and checks
// that every round trip was timed. It measures no speed.
func TestPair(t *testing.T) {
	for _, segments := range []int{1, 2} {
		oneWay, err := pair(lo1, lo2, config{segments: segments, n: 300, timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("%d segment(s): %v", segments, err)
		}
		if len(oneWay) != 300 || oneWay[0] <= 0 || oneWay[0] > oneWay[len(oneWay)-1] {
			t.Errorf("%d segment(s): %d times from %v to %v", segments, len(oneWay), oneWay[0], oneWay[len(oneWay)-1])
		}
	}
}

// TestSegments checks that the two-segment message arrives as the 56 bytes
// goroce's ping-pong datagram has, in one read, and a lone WRITE as 36.
func TestSegments(t *testing.T) {
	for _, segments := range []int{1, 2} {
		a, err := open(netip.AddrPortFrom(lo1, 0), netip.AddrPortFrom(lo2, 9), segments)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(a.fd)
		b, err := open(netip.AddrPortFrom(lo2, 0), netip.AddrPortFrom(lo1, uint16(a.port())), segments)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(b.fd)
		if err := unix.Connect(a.fd, &unix.SockaddrInet4{Port: b.port(), Addr: lo2.As4()}); err != nil {
			t.Fatal(err)
		}
		if err := a.send(timed); err != nil {
			t.Fatal(err)
		}
		if _, err := b.recv(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		want := map[int]uint32{1: writeLen, 2: writeLen + ackLen}[segments]
		if got := b.msg[0].n; got != want {
			t.Errorf("%d segment(s): read %d bytes, want %d", segments, got, want)
		}
	}
}

// TestLateServer has the server start answering late: the client's
// starts queue up at it, and their answers must not be taken for the
// answers to timed messages (then some of those would be left unread).
func TestLateServer(t *testing.T) {
	c := config{segments: 2, n: 100, timeout: 5 * time.Second}
	sv, err := open(netip.AddrPortFrom(lo1, 0), netip.AddrPortFrom(lo2, 9), c.segments)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sv.fd)
	cl, err := open(netip.AddrPortFrom(lo2, 0), netip.AddrPortFrom(lo1, uint16(sv.port())), c.segments)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(cl.fd)
	if err := unix.Connect(sv.fd, &unix.SockaddrInet4{Port: cl.port(), Addr: lo2.As4()}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		time.Sleep(350 * time.Millisecond) // four starts wait in the socket
		done <- serve(sv, c)
	}()
	oneWay, err := ping(cl, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(oneWay) != c.n {
		t.Errorf("%d round trips timed, want %d", len(oneWay), c.n)
	}
	if kind, err := cl.recv(time.Now().Add(100 * time.Millisecond)); !errors.Is(err, errNone) {
		t.Errorf("an answer (kind %d) was left unread", kind)
	}
}

// TestNoServer checks that a client with no server gives up with an
// error after its timeout instead of spinning for ever, and a server with
// no client too.
func TestNoServer(t *testing.T) {
	c := config{segments: 2, n: 10, timeout: 300 * time.Millisecond}
	cl, err := open(netip.AddrPortFrom(lo2, 0), netip.AddrPortFrom(lo1, 9), c.segments)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(cl.fd)
	if _, err := ping(cl, c); err == nil {
		t.Error("ping: no error without a server")
	}
	sv, err := open(netip.AddrPortFrom(lo1, 0), netip.AddrPortFrom(lo2, 9), c.segments)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sv.fd)
	if err := serve(sv, c); !errors.Is(err, errNone) {
		t.Errorf("serve: %v, want %v", err, errNone)
	}
}
