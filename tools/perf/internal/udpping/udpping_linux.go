// Package udpping measures the kernel's floor under goroce's 2-byte
// latency: two ends ping-pong the datagram that carries an ib_write_lat
// message on the wire, with nothing of RDMA on top. By default that is
// goroce's own shape: a 36-byte WRITE and the 20-byte ACK riding with it
// as two UDP_SEGMENT segments of one 56-byte datagram, sent by send(2)
// from a socket connected to the peer whose UDP_SEGMENT option is set,
// read by a spinning non-blocking recvmmsg(2) of one message, with
// UDP_GRO on, as goroce's busy poll reads. What goroce takes beyond this
// figure is its own work.
//
// `go run ./tools/perf targets` times it beside goroce and TCP (the
// udp-echo and udp-ping ends of targets.End), and `go run ./tools/perf
// floor` runs it alone.
package udpping

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The datagram of a ping-pong message: a WRITE of 2 bytes (BTH, RETH,
// payload, pad, ICRC) and an ACK (BTH, AETH, ICRC).
const (
	WriteLen = 12 + 16 + 2 + 2 + 4
	AckLen   = 12 + 4 + 4
)

// The first byte of a message: a client's start, or a timed message. The
// server echoes it, so that the answer to a start the client sent twice is
// never taken for the answer to a timed one.
const (
	timed = 0
	start = 1
)

// ErrNone is what an end returns when no message came within its
// timeout.
var ErrNone = errors.New("udpping: no message")

// A Conn is one end's UDP socket.
type Conn struct {
	fd   int
	size int // bytes sent per message
	msg  [1]mmsghdr
	iov  unix.Iovec
	name unix.RawSockaddrInet4
	out  [WriteLen + AckLen]byte // the message sent; its first byte is timed or start
	buf  [2048]byte              // the message received
	oob  [64]byte
	n    int // the length of the last message received
}

// mmsghdr is struct mmsghdr.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// Listen opens a server's end: a socket bound to local (port 0: one the
// kernel picks) that connects to the first peer it hears from. segments
// is 2 for goroce's datagram of a WRITE and its ACK (56 bytes), 1 for the
// WRITE alone (36).
func Listen(local netip.AddrPort, segments int) (*Conn, error) {
	return open(local, netip.AddrPort{}, segments)
}

// Dial opens a client's end: a socket bound to local and connected to
// peer.
func Dial(local, peer netip.AddrPort, segments int) (*Conn, error) {
	if !peer.IsValid() {
		return nil, errors.New("udpping: no peer to dial")
	}
	return open(local, peer, segments)
}

// open binds a UDP socket to local, connects it to peer if that is valid,
// and sets it up as goroce's per-QP sockets are: UDP_GRO on, and with two
// segments the UDP_SEGMENT option at the WRITE's size.
func open(local, peer netip.AddrPort, segments int) (*Conn, error) {
	switch {
	case segments != 1 && segments != 2:
		return nil, fmt.Errorf("udpping: %d segments: want 1 or 2", segments)
	case !local.Addr().Is4() || peer.IsValid() && !peer.Addr().Is4():
		return nil, errors.New("udpping: IPv4 addresses only")
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("udpping: socket: %w", err)
	}
	c := &Conn{fd: fd, size: WriteLen}
	fail := func(what string, err error) (*Conn, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("udpping: %s: %w", what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1); err != nil {
		return fail("UDP_GRO", err)
	}
	if segments == 2 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT, WriteLen); err != nil {
			return fail("UDP_SEGMENT", err)
		}
		c.size = WriteLen + AckLen
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(local.Port()), Addr: local.Addr().As4()}); err != nil {
		return fail("bind "+local.String(), err)
	}
	if peer.IsValid() {
		if err := c.connect(peer); err != nil {
			return fail("connect "+peer.String(), err)
		}
	}
	c.iov.Base = &c.buf[0]
	c.iov.SetLen(len(c.buf))
	c.msg[0].hdr.Iov = &c.iov
	c.msg[0].hdr.Iovlen = 1
	return c, nil
}

func (c *Conn) connect(peer netip.AddrPort) error {
	return unix.Connect(c.fd, &unix.SockaddrInet4{Port: int(peer.Port()), Addr: peer.Addr().As4()})
}

// Port returns the local port c is bound to.
func (c *Conn) Port() uint16 {
	sa, err := unix.Getsockname(c.fd)
	if err != nil {
		return 0
	}
	return uint16(sa.(*unix.SockaddrInet4).Port)
}

// Close closes c's socket.
func (c *Conn) Close() error { return unix.Close(c.fd) }

// send sends one message whose first byte is kind.
func (c *Conn) send(kind byte) error {
	c.out[0] = kind
	for {
		_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(c.fd), uintptr(unsafe.Pointer(&c.out[0])), uintptr(c.size), 0, 0, 0)
		switch errno {
		case 0:
			return nil
		case unix.EINTR, unix.EAGAIN, unix.ENOBUFS:
			continue
		}
		return fmt.Errorf("udpping: send: %w", errno)
	}
}

// recv spins until a message arrives or the deadline (a time.Now reading
// taken every 1,024 empty polls) passes, and returns the message's first
// byte. A peer not listening yet shows as ECONNREFUSED, which it returns.
func (c *Conn) recv(deadline time.Time) (byte, error) {
	for i := 1; ; i++ {
		h := &c.msg[0].hdr
		h.Control = &c.oob[0]
		h.SetControllen(len(c.oob))
		h.Name = (*byte)(unsafe.Pointer(&c.name))
		h.Namelen = unix.SizeofSockaddrInet4
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(c.fd), uintptr(unsafe.Pointer(&c.msg[0])), 1, unix.MSG_DONTWAIT, 0, 0)
		switch {
		case errno == 0 && n == 1 && c.msg[0].n > 0:
			c.n = int(c.msg[0].n)
			return c.buf[0], nil
		case errno != 0 && errno != unix.EAGAIN && errno != unix.EINTR:
			return 0, fmt.Errorf("udpping: recvmmsg: %w", errno)
		case i%1024 == 0 && time.Now().After(deadline):
			return 0, ErrNone
		}
	}
}

// sender is the address the last message came from.
func (c *Conn) sender() netip.AddrPort {
	p := (*[2]byte)(unsafe.Pointer(&c.name.Port))
	return netip.AddrPortFrom(netip.AddrFrom4(c.name.Addr), uint16(p[0])<<8|uint16(p[1]))
}

// Serve answers every message, a start with a start, until it has
// answered n timed ones or none comes within timeout. An unconnected end
// (Listen) connects to the sender of the first message.
func (c *Conn) Serve(n int, timeout time.Duration) error {
	connected := false
	if _, err := unix.Getpeername(c.fd); err == nil {
		connected = true
	}
	for i := 0; i < n; {
		kind, err := c.recv(time.Now().Add(timeout))
		if errors.Is(err, unix.ECONNREFUSED) {
			continue // an ICMP error from before the client listened
		}
		if err != nil {
			return fmt.Errorf("%w (%d of %d answered)", err, i, n)
		}
		if !connected {
			if err := c.connect(c.sender()); err != nil {
				return fmt.Errorf("udpping: connect %v: %w", c.sender(), err)
			}
			connected = true
		}
		if err := c.send(kind); err != nil {
			return err
		}
		if kind == timed {
			i++
		}
	}
	return nil
}

// Ping sends a start every 100 ms until the server answers one (it may
// not be listening yet), then times n round trips and returns their
// one-way times, sorted. Answers to further starts are read and passed
// over.
func (c *Conn) Ping(n int, timeout time.Duration) ([]time.Duration, error) {
	for begin := time.Now(); ; {
		if err := c.send(start); err != nil && !errors.Is(err, unix.ECONNREFUSED) {
			return nil, err
		}
		_, err := c.recv(time.Now().Add(100 * time.Millisecond))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNone) && !errors.Is(err, unix.ECONNREFUSED) {
			return nil, err
		}
		if time.Since(begin) > timeout {
			return nil, fmt.Errorf("udpping: no answer within %v", timeout)
		}
	}
	oneWay := make([]time.Duration, n)
	for i := range oneWay {
		t := time.Now()
		if err := c.send(timed); err != nil {
			return nil, err
		}
		for {
			kind, err := c.recv(t.Add(timeout))
			if err != nil {
				return nil, fmt.Errorf("round trip %d of %d: %w", i+1, n, err)
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

// Pair runs both ends in this process, each on a thread of its own, the
// server's bound to a and the client's to b, and returns the client's
// one-way times, sorted.
func Pair(a, b netip.Addr, segments, n int, timeout time.Duration) ([]time.Duration, error) {
	s, err := Listen(netip.AddrPortFrom(a, 0), segments)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	c, err := Dial(netip.AddrPortFrom(b, 0), netip.AddrPortFrom(a, s.Port()), segments)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- s.Serve(n, timeout)
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	oneWay, err := c.Ping(n, timeout)
	if serr := <-done; err == nil {
		err = serr
	}
	return oneWay, err
}

// Typical is the median of sorted one-way times, in microseconds.
func Typical(oneWay []time.Duration) float64 {
	if len(oneWay) == 0 {
		return 0
	}
	return float64(oneWay[len(oneWay)/2]) / 1e3
}
