package udp

import (
	"encoding/binary"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/internal/link"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/stamp"
	"github.com/goroce/goroce/internal/wire"
)

// recvmmsg and sendmmsg are called directly rather than through
// golang.org/x/net/ipv4.PacketConn: its ReadBatch allocates a net.UDPAddr
// (and its IP) for every message received, and its WriteBatch wants a
// net.Addr per message. Here the message headers, I/O vectors and socket
// addresses are preallocated once per link and direction, and addresses
// convert to and from netip.AddrPort without allocating.

// mmsghdr is struct mmsghdr of <sys/socket.h>. Go's layout rules give it C's
// size and alignment on every Linux architecture (msghdr then an unsigned
// int, padded to the msghdr's alignment).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// mmsg is the preallocated state of batched I/O in one direction.
// Its owner serializes its use (UDP.readMu or UDP.writeMu).
type mmsg struct {
	hs    [link.MaxBatch]mmsghdr
	iovs  [link.MaxBatch]unix.Iovec
	names [link.MaxBatch]unix.RawSockaddrInet6 // large enough for either family
	ctls  [link.MaxBatch]ctlBuf                // control messages: TOS and GRO size received, ECN CE and GSO size to send
	segs  [link.MaxBatch]uint8                 // packets in each message sent (more than 1: a GSO super-packet)

	// Which message headers readFrom must set up for a read: the first
	// dirty ones (the kernel wrote back the headers of the datagrams a
	// read returned, and clearBufs clears control buffers) and those from
	// setUp on (never set up). The others keep what readFrom set, which an
	// empty read (a busy poller's, most of them) leaves alone.
	dirty, setUp int

	// Arguments and results of the system call in progress, so that the
	// functions handed to sockFD.Read and Write are method values bound once,
	// not closures allocated per call.
	off, cnt int
	noWait   bool // a read returns 0 datagrams instead of waiting
	n        int
	errno    syscall.Errno
	recvF    func(fd uintptr) bool
	sendF    func(fd uintptr) bool
	loneF    func(fd uintptr) bool
	segOptF  func(fd uintptr) bool
	segOpt   int32 // the UDP_SEGMENT option segOptF sets
}

func newMmsg() *mmsg {
	m := new(mmsg)
	m.recvF = m.recv
	m.sendF = m.send
	m.loneF = m.sendLone
	m.segOptF = m.setSegOpt
	for i := range m.hs {
		h := &m.hs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&m.names[i]))
		h.Iov = &m.iovs[i]
		h.SetIovlen(1)
		m.segs[i] = 1
	}
	return m
}

// setBuf points message i's I/O vector at b.
func (m *mmsg) setBuf(i int, b []byte) {
	v := &m.iovs[i]
	if len(b) == 0 {
		v.Base = nil
	} else {
		v.Base = &b[0]
	}
	v.SetLen(len(b))
}

// clearBufs forgets the first n buffers, so that the link keeps no
// reference to the caller's memory between calls, and their control
// messages, and gives each of the first n messages its own I/O vector
// again (setMsg may have pointed them elsewhere).
func (m *mmsg) clearBufs(n int) {
	m.dirty = max(m.dirty, n)
	for i := range n {
		m.iovs[i].Base = nil
		h := &m.hs[i].hdr
		h.Control = nil
		h.SetControllen(0)
		h.Iov = &m.iovs[i]
		h.SetIovlen(1)
		m.segs[i] = 1
	}
}

// readFrom receives up to cnt datagrams into messages 0..cnt-1, waiting
// until at least one is there; with wait false it returns 0
// at once when none is.
func (m *mmsg) readFrom(rc *sockFD, cnt int, wait bool) (int, error) {
	d := min(m.dirty, cnt)
	m.setUpRead(0, d)
	m.setUpRead(max(m.setUp, d), cnt)
	m.setUp = max(m.setUp, cnt)
	if m.dirty <= cnt {
		m.dirty = 0
	}
	m.off, m.cnt, m.noWait, m.n = 0, cnt, !wait, 0
	err := rc.Read(m.recvF)
	m.dirty = max(m.dirty, m.n) // the kernel wrote back the headers of what it returned
	if err != nil {
		return 0, err
	}
	if m.errno != 0 {
		return 0, os.NewSyscallError("recvmmsg", m.errno)
	}
	return m.n, nil
}

// setUpRead sets up message headers i..j-1 for a read.
func (m *mmsg) setUpRead(i, j int) {
	for ; i < j; i++ {
		h := &m.hs[i].hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.Control = (*byte)(unsafe.Pointer(&m.ctls[i]))
		h.SetControllen(len(m.ctls[i]) * 8)
		h.Flags = 0
		m.hs[i].n = 0
	}
}

// writeTo sends messages off..off+cnt-1, waiting while the
// socket buffer is full. It returns how many were sent; the kernel may
// send fewer than cnt without an error. lone sends message 0, the only
// one, by sendto (loneSend says when it can).
func (m *mmsg) writeTo(rc *sockFD, off, cnt int, lone bool) (int, error) {
	m.off, m.cnt, m.noWait = off, cnt, false
	f, name := m.sendF, "sendmmsg"
	if lone {
		f, name = m.loneF, "sendto"
	}
	if err := rc.Write(f); err != nil {
		return 0, err
	}
	if m.errno != 0 {
		return 0, os.NewSyscallError(name, m.errno)
	}
	return m.n, nil
}

// setSegment sets rc's UDP_SEGMENT option to seg.
func (m *mmsg) setSegment(rc *sockFD, seg int) error {
	m.segOpt = int32(seg)
	if err := rc.Write(m.segOptF); err != nil {
		return err
	}
	if m.errno != 0 {
		return os.NewSyscallError("setsockopt", m.errno)
	}
	return nil
}

func (m *mmsg) setSegOpt(fd uintptr) bool {
	_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT, uintptr(unsafe.Pointer(&m.segOpt)), 4, 0)
	m.errno = e
	return true
}

func (m *mmsg) recv(fd uintptr) bool {
	return m.call(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&m.hs[m.off])), uintptr(m.cnt))
}

func (m *mmsg) send(fd uintptr) bool {
	return m.call(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&m.hs[m.off])), uintptr(m.cnt))
}

// sendLone sends message 0 by sendto(2) on its connected socket, with no
// address and no control message, for writeTo: one message sent, or none.
func (m *mmsg) sendLone(fd uintptr) bool {
	v := m.hs[0].hdr.Iov
	done := m.call(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(v.Base)), uintptr(v.Len))
	if done && m.errno == 0 {
		m.n = 1
	}
	return done
}

// call makes the system call trap (recvmmsg, sendmmsg or sendto) on a
// non-blocking socket with the arguments after the descriptor (the rest
// 0), and reports whether it is done (false: wait for the socket to
// become ready and call again); m.n is its result. With noWait, a socket
// that is not ready is done with 0 messages.
//
// The call is raw (unix.RawSyscall6): it does not tell the Go scheduler
// it is in a system call, and keeps its P. Every socket here is
// non-blocking (openSocket; TestUDPSourcePorts checks), so the call never
// waits, though it may work for a while: a sendmmsg of a 64 KiB GSO run on
// loopback copies it and runs the receiving socket's side of the kernel,
// tens of microseconds. Told of it (unix.Syscall6), the scheduler's
// monitor takes the P of a call that lasts beyond 20 µs and wakes another
// thread to run it, and the caller, back from the kernel, must find a P
// again: two thread wake-ups for nothing, each an exit to the host on a VM
// whose idle vCPUs halt (docs/design/tuning.md#raw-system-calls). A
// garbage collection waits for a raw call to return, as for any running
// goroutine.
func (m *mmsg) call(trap, fd, a1, a2 uintptr) bool {
	send := trap != unix.SYS_RECVMMSG
	for {
		if stamp.Enabled && send {
			stamp.Mark(stamp.Send)
		}
		n, _, e := unix.RawSyscall6(trap, fd, a1, a2, 0, 0, 0)
		if stamp.Enabled {
			if send {
				stamp.Close()
			} else if e == 0 && n > 0 {
				stamp.Mark(stamp.Read)
			}
		}
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if m.noWait {
				m.n, m.errno = 0, 0
				return true
			}
			return false
		}
		m.n, m.errno = int(n), e
		return true
	}
}

// setName writes a as the socket address of message i. scope is the IPv6
// scope (interface index) for link-local peers.
func (m *mmsg) setName(i int, a netip.AddrPort, scope uint32) {
	sa := &m.names[i]
	h := &m.hs[i].hdr
	port := a.Port()
	if a.Addr().Is4() {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.Addr().As4()}
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		h.Namelen = unix.SizeofSockaddrInet4
		return
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.Addr().As16(), Scope_id: scope}
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	h.Namelen = unix.SizeofSockaddrInet6
}

// name returns the socket address the kernel wrote for message i, unmapped
// and without zone; ok is false for a family other than IPv4 and IPv6.
func (m *mmsg) name(i int) (a netip.AddrPort, ok bool) {
	sa := &m.names[i]
	p := (*[2]byte)(unsafe.Pointer(&sa.Port)) // same offset in both families
	port := uint16(p[0])<<8 | uint16(p[1])
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port), true
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port), true
	}
	return netip.AddrPort{}, false
}

// ctlBuf holds one message's control messages, aligned for cmsghdr: room
// for three carrying an int each (24 bytes each on 64-bit systems): the
// TOS or traffic class, the GRO segment size and the socket's drop count.
type ctlBuf [12]uint64

// ECN codepoints: the low two bits of the IPv4 TOS and the IPv6 traffic
// class (RFC 3168).
const (
	ecnMask = 0x03
	ecnCE   = 0x03
)

// setCE gives message i a control message that sends it with ECN CE, the
// whole TOS (IPv4) or traffic class (IPv6) being 0x03; or none.
func (m *mmsg) setCE(i int, ce, is6 bool) {
	h := &m.hs[i].hdr
	if !ce {
		h.Control = nil
		h.SetControllen(0)
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&m.ctls[i])), len(m.ctls[i])*8)
	clear(b)
	c := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	c.Level, c.Type = unix.IPPROTO_IP, unix.IP_TOS
	if is6 {
		c.Level, c.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	c.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(b[unix.CmsgLen(0):], ecnCE)
	h.Control = &b[0]
	h.SetControllen(unix.CmsgSpace(4))
}

// readAsk sizes the reads that do not wait (PollBatch, a busy poller's):
// how many datagrams each asks recvmmsg for. recvmmsg goes on reading
// until it has as many as it asked for, and the try that finds the queue
// empty costs what a read does before it dequeues (the next message
// header copied in, its I/O vector imported). A ping-pong's poller pays
// it on every message, each of which comes alone, between reads that
// find nothing. So after a read that found a lone request (one datagram
// of at most loneBytes that is not an ACK) the next read asks for one
// datagram, unless that read itself asked for one right after a read
// that found something: two reads in a row that found one each mean
// datagrams come faster than the poller reads them (a stream), and the
// next read asks for all, as every other read does. ACKs are left out: a
// bandwidth test's requester reads them at random times, often two
// queued, and asking for one after each would make it read its socket
// more often. Asking for as many as the last read found would cost a
// stream: with UDP_GRO its datagrams are super-packets, and a read of one
// datagram can hold dozens of packets (docs/design/tuning.md#read-ask).
type readAsk struct {
	one  bool // the next read asks for one datagram
	last bool // the last read found something
}

// loneBytes is the largest datagram readAsk takes for a lone request: a
// small WRITE or SEND and the ACK that rides with it.
const loneBytes = 512

// next returns how many of max datagrams the next read asks for.
func (a *readAsk) next(max int) int {
	if a.one {
		return 1
	}
	return max
}

// got notes that a read that asked for asked datagrams found k; first is
// the first datagram's start (its BTH), when k > 0.
func (a *readAsk) got(asked, k int, first []byte) {
	if k > 0 {
		lone := k == 1 && len(first) <= loneBytes && len(first) > 0 &&
			first[0] != wire.OpAcknowledge && first[0] != wire.OpAtomicAcknowledge
		a.one = lone && !(asked == 1 && a.last)
	}
	a.last = k > 0
}

// first returns what the last read put in message i: its bytes, at most
// the buffer's.
func (m *mmsg) first(i int) []byte {
	n := min(int(m.hs[i].n), int(m.iovs[i].Len))
	if n <= 0 || m.iovs[i].Base == nil {
		return nil
	}
	return unsafe.Slice(m.iovs[i].Base, n)
}
