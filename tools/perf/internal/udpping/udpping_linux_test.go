package udpping

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

var (
	lo1 = netip.MustParseAddr("127.0.0.1")
	lo2 = netip.MustParseAddr("127.0.0.2")
)

// TestPair ping-pongs both shapes of datagram over loopback and checks
// that every round trip was timed. It measures no speed.
func TestPair(t *testing.T) {
	for _, segments := range []int{1, 2} {
		oneWay, err := Pair(lo1, lo2, segments, 300, 5*time.Second)
		if err != nil {
			t.Fatalf("%d segment(s): %v", segments, err)
		}
		if len(oneWay) != 300 || oneWay[0] <= 0 || oneWay[0] > oneWay[len(oneWay)-1] {
			t.Errorf("%d segment(s): %d times from %v to %v", segments, len(oneWay), oneWay[0], oneWay[len(oneWay)-1])
		}
		if got, want := Typical(oneWay), float64(oneWay[150])/1e3; got != want {
			t.Errorf("Typical = %v, want the median %v", got, want)
		}
	}
}

// dialPair opens a listening end on lo1 and a client end on lo2 dialed to
// it.
func dialPair(t *testing.T, segments int) (s, c *Conn) {
	t.Helper()
	s, err := Listen(netip.AddrPortFrom(lo1, 0), segments)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err = Dial(netip.AddrPortFrom(lo2, 0), netip.AddrPortFrom(lo1, s.Port()), segments)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return s, c
}

// TestSegments checks that the two-segment message arrives as the 56 bytes
// goroce's ping-pong datagram has, in one read, and a lone WRITE as 36;
// and that the listening end learns the client's address from it.
func TestSegments(t *testing.T) {
	for _, segments := range []int{1, 2} {
		s, c := dialPair(t, segments)
		if err := c.send(timed); err != nil {
			t.Fatal(err)
		}
		if _, err := s.recv(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if want := map[int]int{1: WriteLen, 2: WriteLen + AckLen}[segments]; s.n != want {
			t.Errorf("%d segment(s): read %d bytes, want %d", segments, s.n, want)
		}
		if want := netip.AddrPortFrom(lo2, c.Port()); s.sender() != want {
			t.Errorf("sender %v, want %v", s.sender(), want)
		}
	}
}

// TestLateServer has the server answer late: three starts of the client
// already wait in its socket when Ping sends its own, and their answers
// must not be taken for the answers to timed messages (then some of
// those would be left unread).
func TestLateServer(t *testing.T) {
	const n = 100
	s, c := dialPair(t, 2)
	for range 3 {
		if err := c.send(start); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(n, 5*time.Second) }()
	oneWay, err := c.Ping(n, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(oneWay) != n {
		t.Errorf("%d round trips timed, want %d", len(oneWay), n)
	}
	if kind, err := c.recv(time.Now().Add(100 * time.Millisecond)); !errors.Is(err, ErrNone) {
		t.Errorf("an answer (kind %d) was left unread", kind)
	}
}

// TestClientFirst starts the client before the server's socket exists:
// its first starts are refused, and it keeps sending until one is
// answered.
func TestClientFirst(t *testing.T) {
	const n = 50
	probe, err := Listen(netip.AddrPortFrom(lo1, 0), 2)
	if err != nil {
		t.Fatal(err)
	}
	port := probe.Port() // free now, most likely still free in a moment
	probe.Close()
	c, err := Dial(netip.AddrPortFrom(lo2, 0), netip.AddrPortFrom(lo1, port), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		time.Sleep(250 * time.Millisecond)
		s, err := Listen(netip.AddrPortFrom(lo1, port), 2)
		if err != nil {
			done <- err
			return
		}
		defer s.Close()
		done <- s.Serve(n, 5*time.Second)
	}()
	oneWay, err := c.Ping(n, 5*time.Second)
	if serr := <-done; serr != nil {
		t.Fatal(serr)
	}
	if err != nil || len(oneWay) != n {
		t.Fatalf("Ping: %d times, %v", len(oneWay), err)
	}
}

// TestNoPeer checks that a client with no server, and a server with no
// client, give up with an error after their timeout instead of spinning
// for ever.
func TestNoPeer(t *testing.T) {
	s, c := dialPair(t, 2)
	s.Close() // the client's starts are refused
	if _, err := c.Ping(10, 300*time.Millisecond); err == nil {
		t.Error("Ping: no error without a server")
	}
	s2, err := Listen(netip.AddrPortFrom(lo1, 0), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.Serve(10, 300*time.Millisecond); !errors.Is(err, ErrNone) {
		t.Errorf("Serve: %v, want %v", err, ErrNone)
	}
}

// TestOpenRejects checks the arguments an end cannot take.
func TestOpenRejects(t *testing.T) {
	v6 := netip.MustParseAddrPort("[::1]:0")
	for _, f := range []func() (*Conn, error){
		func() (*Conn, error) { return Listen(netip.AddrPortFrom(lo1, 0), 3) },
		func() (*Conn, error) { return Listen(v6, 2) },
		func() (*Conn, error) { return Dial(netip.AddrPortFrom(lo1, 0), netip.AddrPort{}, 2) },
		func() (*Conn, error) { return Dial(netip.AddrPortFrom(lo1, 0), v6, 2) },
	} {
		if c, err := f(); err == nil {
			c.Close()
			t.Error("no error")
		}
	}
}
