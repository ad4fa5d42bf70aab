//go:build linux

// Command udppingpong measures the kernel's floor under goroce's 2-byte
// latency: two ends ping-pong the datagram that carries an ib_write_lat
// message on the wire, with nothing of RDMA on top. By default that is
// goroce's own shape since the thirtieth round of docs/perf/HISTORY.md: a
// 36-byte WRITE and the 20-byte ACK riding with it as two UDP_SEGMENT
// segments of one 56-byte datagram, sent by send(2) from a socket connected
// to the peer whose UDP_SEGMENT option is set, read by a spinning
// non-blocking recvmmsg(2) of one message from a connected socket with
// UDP_GRO on, as goroce's busy poll reads. What goroce takes beyond this
// figure is its own work.
//
//	go run ./test/perf/udppingpong                  # both ends in one process, 127.0.0.1 and 127.0.0.2
//	go run ./test/perf/udppingpong -segments 1      # a lone 36-byte datagram instead
//	sudo ip netns exec A udppingpong -server -local 198.18.0.1 -peer 198.18.0.2 &
//	sudo ip netns exec B udppingpong -local 198.18.0.2 -peer 198.18.0.1   # across a veth, two processes
//
// Compare runs alternately: the figures of one run move with the machine.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The datagram of a ping-pong message: a WRITE of 2 bytes (BTH, RETH,
// payload, pad, ICRC) and an ACK (BTH, AETH, ICRC).
const (
	writeLen = 12 + 16 + 2 + 2 + 4
	ackLen   = 12 + 4 + 4
)

// end is one side's socket.
type end struct {
	fd   int
	size int // bytes sent per message
	msg  [1]mmsghdr
	iov  unix.Iovec
	out  [writeLen + ackLen]byte // the message sent; its first byte says whether it is a start
	buf  [2048]byte              // the message received
	oob  [64]byte
}

// The first byte of a message: a client's start, or a timed message (the
// server echoes it, so that the answer to a start the client sent twice is
// never taken for the answer to a timed one).
const (
	timed = 0
	start = 1
)

// mmsghdr is struct mmsghdr.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// open binds a UDP socket to local, connects it to peer and sets it up as
// goroce's per-QP sockets are: UDP_GRO on, and with two segments the
// UDP_SEGMENT option at the WRITE's size.
func open(local, peer netip.AddrPort, segments int) (*end, error) {
	if !local.Addr().Is4() || !peer.Addr().Is4() {
		return nil, errors.New("udppingpong: IPv4 addresses only")
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	e := &end{fd: fd, size: writeLen}
	fail := func(what string, err error) (*end, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("udppingpong: %s: %w", what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1); err != nil {
		return fail("UDP_GRO", err)
	}
	if segments == 2 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT, writeLen); err != nil {
			return fail("UDP_SEGMENT", err)
		}
		e.size = writeLen + ackLen
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(local.Port()), Addr: local.Addr().As4()}); err != nil {
		return fail("bind "+local.String(), err)
	}
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(peer.Port()), Addr: peer.Addr().As4()}); err != nil {
		return fail("connect "+peer.String(), err)
	}
	e.iov.Base = &e.buf[0]
	e.iov.SetLen(len(e.buf))
	e.msg[0].hdr.Iov = &e.iov
	e.msg[0].hdr.Iovlen = 1
	return e, nil
}

// port is the local port e is bound to.
func (e *end) port() int {
	sa, err := unix.Getsockname(e.fd)
	if err != nil {
		return 0
	}
	return sa.(*unix.SockaddrInet4).Port
}

// send sends one message whose first byte is kind.
func (e *end) send(kind byte) error {
	e.out[0] = kind
	for {
		_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(e.fd), uintptr(unsafe.Pointer(&e.out[0])), uintptr(e.size), 0, 0, 0)
		switch errno {
		case 0:
			return nil
		case unix.EINTR, unix.EAGAIN, unix.ENOBUFS:
			continue
		}
		return fmt.Errorf("udppingpong: send: %w", errno)
	}
}

// errNone is recv's answer when no message came before the deadline.
var errNone = errors.New("udppingpong: no message")

// recv spins until a message arrives or the deadline (a time.Now reading
// taken every 1,024 empty polls) passes, and returns the message's first
// byte. A peer not listening yet shows as ECONNREFUSED, which it returns.
func (e *end) recv(deadline time.Time) (byte, error) {
	for i := 1; ; i++ {
		e.msg[0].hdr.Control = &e.oob[0]
		e.msg[0].hdr.SetControllen(len(e.oob))
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(e.fd), uintptr(unsafe.Pointer(&e.msg[0])), 1, unix.MSG_DONTWAIT, 0, 0)
		switch {
		case errno == 0 && n == 1 && e.msg[0].n > 0:
			return e.buf[0], nil
		case errno != 0 && errno != unix.EAGAIN && errno != unix.EINTR:
			return 0, fmt.Errorf("udppingpong: recvmmsg: %w", errno)
		case i%1024 == 0 && time.Now().After(deadline):
			return 0, errNone
		}
	}
}

// config is one run.
type config struct {
	segments int           // 2: a WRITE and its ACK as GSO segments; 1: the WRITE alone
	n        int           // round trips timed
	timeout  time.Duration // how long an end waits for a message before it gives up
}

// serve answers every message, a start with a start, until it has answered
// n timed ones or none comes within the timeout.
func serve(e *end, c config) error {
	for i := 0; i < c.n; {
		kind, err := e.recv(time.Now().Add(c.timeout))
		if errors.Is(err, unix.ECONNREFUSED) {
			continue // an ICMP error from before the client listened
		}
		if err != nil {
			return fmt.Errorf("%w (%d of %d answered)", err, i, c.n)
		}
		if err := e.send(kind); err != nil {
			return err
		}
		if kind == timed {
			i++
		}
	}
	return nil
}

// ping sends a start every 100 ms until the server answers one (it may
// not be listening yet), then times n round trips and returns their one-way
// times, sorted. Answers to further starts are read and passed over.
func ping(e *end, c config) ([]time.Duration, error) {
	for begin := time.Now(); ; {
		if err := e.send(start); err != nil && !errors.Is(err, unix.ECONNREFUSED) {
			return nil, err
		}
		_, err := e.recv(time.Now().Add(100 * time.Millisecond))
		if err == nil {
			break
		}
		if !errors.Is(err, errNone) && !errors.Is(err, unix.ECONNREFUSED) {
			return nil, err
		}
		if time.Since(begin) > c.timeout {
			return nil, fmt.Errorf("udppingpong: no answer within %v", c.timeout)
		}
	}
	oneWay := make([]time.Duration, c.n)
	for i := range oneWay {
		t := time.Now()
		if err := e.send(timed); err != nil {
			return nil, err
		}
		for {
			kind, err := e.recv(t.Add(c.timeout))
			if err != nil {
				return nil, fmt.Errorf("round trip %d of %d: %w", i+1, c.n, err)
			}
			if kind == timed {
				break
			}
		}
		oneWay[i] = time.Since(t) / 2
	}
	slices.Sort(oneWay)
	return oneWay, nil
}

// pair runs both ends in this process, each on a thread of its own, over
// two sockets it binds to local and peer (ports chosen by the kernel).
func pair(local, peer netip.Addr, c config) ([]time.Duration, error) {
	// Bind both first, then connect each to the other's port.
	a, err := open(netip.AddrPortFrom(local, 0), netip.AddrPortFrom(peer, 9), c.segments)
	if err != nil {
		return nil, err
	}
	defer unix.Close(a.fd)
	b, err := open(netip.AddrPortFrom(peer, 0), netip.AddrPortFrom(local, uint16(a.port())), c.segments)
	if err != nil {
		return nil, err
	}
	defer unix.Close(b.fd)
	if err := unix.Connect(a.fd, &unix.SockaddrInet4{Port: b.port(), Addr: peer.As4()}); err != nil {
		return nil, fmt.Errorf("udppingpong: connect: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- serve(a, c)
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	oneWay, err := ping(b, c)
	if serr := <-done; err == nil {
		err = serr
	}
	return oneWay, err
}

func main() {
	var (
		c       config
		server  = flag.Bool("server", false, "answer a client instead of timing (two processes)")
		local   = flag.String("local", "127.0.0.1", "this end's IPv4 address")
		peer    = flag.String("peer", "127.0.0.2", "the other end's IPv4 address")
		port    = flag.Int("port", 19790, "the UDP port both ends use, with -server or -client")
		client  = flag.Bool("client", false, "time a server started with -server (two processes)")
		verbose = flag.Bool("v", false, "print the percentiles too")
	)
	flag.IntVar(&c.segments, "segments", 2, "2: a WRITE and its ACK as two GSO segments (56 bytes); 1: the WRITE alone (36 bytes)")
	flag.IntVar(&c.n, "n", 50000, "round trips timed")
	flag.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long an end waits for a message")
	flag.Parse()
	if c.segments != 1 && c.segments != 2 || c.n < 1 || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	la, err1 := netip.ParseAddr(*local)
	pa, err2 := netip.ParseAddr(*peer)
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "udppingpong:", err)
		os.Exit(2)
	}
	runtime.GOMAXPROCS(2)
	var oneWay []time.Duration
	var err error
	switch {
	case *server || *client:
		var e *end
		if e, err = open(netip.AddrPortFrom(la, uint16(*port)), netip.AddrPortFrom(pa, uint16(*port)), c.segments); err == nil {
			runtime.LockOSThread()
			if *server {
				err = serve(e, c)
			} else {
				oneWay, err = ping(e, c)
			}
		}
	default:
		oneWay, err = pair(la, pa, c)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if oneWay == nil {
		return
	}
	at := func(q float64) float64 { return float64(oneWay[int(q*float64(len(oneWay)-1))]) / 1e3 }
	fmt.Printf("%d bytes in %d segment(s), %d round trips: one way %.2f us (median)\n", map[int]int{1: writeLen, 2: writeLen + ackLen}[c.segments], c.segments, c.n, at(0.5))
	if *verbose {
		fmt.Printf("min %.2f  p1 %.2f  p99 %.2f  p99.9 %.2f  max %.2f us\n", at(0), at(0.01), at(0.99), at(0.999), at(1))
	}
}
