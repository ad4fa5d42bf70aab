package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/netns"
)

// Connected port sockets.
//
// A datagram sent with a destination address from an unconnected socket
// costs the kernel a route lookup; a connected socket keeps its route
// (docs/design/tuning.md#connected-port-sockets). So a
// per-QP port socket is connected to the peer of the first packet it
// sends (Link.connectPort), and datagrams to that peer leave without an
// address; datagrams to any other peer still name theirs.
//
// The catch is the IPv4 identification, which the ICRC covers. An
// unconnected socket with DF sends ID 0; a connected one numbers its
// datagrams from a per-socket counter that connect(2) sets to a random
// value (ip_select_ident_segs, __ip4_datagram_connect), whatever the
// destination of each datagram. A UDP socket cannot read the counter, so
// an idProbe learns it: the port socket sends a few datagrams to the
// probe's own socket, whose classic BPF filter truncates each to a length
// that encodes a byte of the datagram's IP ID (the filter sees the IP
// header; the application sees only the length). From there the link
// counts: each datagram takes the next ID; a UDP_SEGMENT super-packet's
// segment k takes base+k, and the counter then moves on by one (kernels
// that reserve an ID per segment: by the number of segments; the probe
// tells which). Any send error leaves the counter unknown, and the next
// send learns it again; a socket whose counter cannot be learned is
// disconnected and sends unconnected, with ID 0, as before.
//
// IPv6 has no identification: a port socket is connected at once.

// probeLen is the payload of one probe datagram: the filter keeps 1 to
// 256 bytes of it.
const probeLen = 256

// probeWait bounds the wait for the probe datagrams, which loopback
// delivers within the sending call unless the kernel defers its softirq.
const probeWait = 200 * time.Millisecond

// probeFilter is the probe socket's classic BPF program. It runs with the
// UDP header at offset 0: a datagram whose first payload byte (the
// selector) is even keeps 1 + the high byte of its IP ID bytes of
// payload, an odd one 1 + the low byte. The socket hands the truncated
// datagram on (sk_filter_trim_cap), so its length carries the byte.
var probeFilter = []unix.SockFilter{
	/* 0 */ {Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 8}, // A = selector (a datagram without one is dropped)
	/* 1 */ {Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, Jt: 3, Jf: 0, K: 1},
	/* 2 */ {Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: skfNetOff + 4}, // A = IP ID
	/* 3 */ {Code: unix.BPF_ALU | unix.BPF_RSH | unix.BPF_K, K: 8},
	/* 4 */ {Code: unix.BPF_JMP | unix.BPF_JA, K: 2},
	/* 5 */ {Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: skfNetOff + 4},
	/* 6 */ {Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: 0xff},
	/* 7 */ {Code: unix.BPF_ALU | unix.BPF_ADD | unix.BPF_K, K: 8 + 1}, // the UDP header and 1
	/* 8 */ {Code: unix.BPF_RET | unix.BPF_A},
}

// skfNetOff is SKF_NET_OFF (linux/filter.h: -0x100000) as the uint32 a BPF
// instruction's K holds: loads from there on read the network (IP) header.
const skfNetOff = 1<<32 - 0x100000

// idCount is what the link knows of a connected IPv4 port socket's ID
// counter.
type idCount struct {
	known  bool
	next   uint16 // the ID of the next datagram (the first segment of a super-packet)
	perSeg bool   // a super-packet moves the counter on by its segments, not by one
}

// advance moves c past a datagram of segs segments.
func (c *idCount) advance(segs int) {
	if c.perSeg {
		c.next += uint16(segs)
	} else {
		c.next++
	}
}

// idProbe is a link's socket for learning ID counters (IPv4 only).
type idProbe struct {
	fd  int
	to  unix.SockaddrInet4
	msg [2 * probeLen]byte
	buf [probeLen + 1]byte
	oob []byte // UDP_SEGMENT for the super-packet probe, in ctl
	ctl ctlBuf
}

// newIDProbe opens a probe socket on ip (an IPv4 address of this host) in
// ns.
func newIDProbe(ip netip.Addr, ns *netns.NS) (*idProbe, error) {
	var fd int
	err := ns.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		return err
	})
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	// The filter goes on before bind: no datagram may arrive unfiltered.
	prog := unix.SockFprog{Len: uint16(len(probeFilter)), Filter: &probeFilter[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("SO_ATTACH_FILTER: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: ip.As4()}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind: %w", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("getsockname", err)
	}
	port := sa.(*unix.SockaddrInet4).Port
	p := &idProbe{fd: fd, to: unix.SockaddrInet4{Port: port, Addr: ip.As4()}}
	p.oob = p.ctl.segmentSize(probeLen)
	return p, nil
}

func (p *idProbe) close() { unix.Close(p.fd) }

var errProbe = errors.New("link: IPv4 ID counter not learned")

// learn sends probes from fd, a connected IPv4 socket bound to src, and
// returns its ID counter. With gso one probe is a two-segment
// super-packet, which tells how the counter moves on after one.
//
// The probes, their IDs counted from v, the first's:
//
//	probe 0: ID v          high byte
//	probe 1: ID v+1        low byte
//	probe 2: ID v+2        high byte  (with gso: segment 0 of a super-packet)
//	probe 3: ID v+3        low byte   (with gso: its segment 1)
//	probe 4: ID v+3 or v+4 low byte   (gso only: v+4 if the super-packet took 2)
//
// v comes from the first two; the next two check it (a kernel that
// numbered differently fails the check with odds of 65,535 in 65,536).
// A probe's first payload byte, which the filter keeps, is its selector:
// bit 0 asks for the low byte, bits 1-3 number the probe, bits 4-7 are
// random for each call, and a datagram whose source is not src or whose
// selector is not one of this call's is ignored, so that nothing sent to
// the probe socket from elsewhere passes for a probe.
func (p *idProbe) learn(fd int, src netip.AddrPort, gso bool) (idCount, error) {
	p.drain()
	deadline := monotime.Now().Add(probeWait)
	nonce := byte(rand.Uint32()) << 4
	sel := func(probe int) byte { return nonce | byte(probe)<<1 | byte(probe&1|probe>>2) }
	// sendOne sends one probe message. A send fails before the datagram
	// is built, taking no ID, when the socket reports an ICMP error an
	// earlier datagram drew, or when its buffer is full: it is sent
	// again.
	sendOne := func(f func() error) error {
		for tries := 0; ; tries++ {
			err := f()
			switch {
			case err == nil:
				return nil
			case icmpError(err) && tries < 4:
				continue
			case err == unix.EAGAIN && monotime.Now().Before(deadline):
				fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
				unix.Poll(fds, int(monotime.Until(deadline)/time.Millisecond)+1)
				continue
			}
			return err
		}
	}
	send := func(probe int) error {
		p.msg[0] = sel(probe)
		return sendOne(func() error { return unix.Sendto(fd, p.msg[:probeLen], 0, &p.to) })
	}
	want := 4
	if gso {
		want = 5
	}
	for probe := 0; probe < want; probe++ {
		var err error
		if gso && probe == 2 {
			p.msg[0], p.msg[probeLen] = sel(2), sel(3)
			err = sendOne(func() error {
				_, err := unix.SendmsgN(fd, p.msg[:], p.oob, &p.to, 0)
				return err
			})
			probe++
		} else {
			err = send(probe)
		}
		if err != nil {
			return idCount{}, err
		}
	}
	var got [5]int // per probe, its byte + 1; 0: not seen
	for seen := 0; seen < want; {
		n, from, err := unix.Recvfrom(p.fd, p.buf[:], unix.MSG_DONTWAIT)
		if err == unix.EAGAIN {
			left := monotime.Until(deadline)
			if left <= 0 {
				return idCount{}, fmt.Errorf("%w: %d of %d probes arrived", errProbe, seen, want)
			}
			fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
			if _, err := unix.Poll(fds, int(left/time.Millisecond)+1); err != nil && err != unix.EINTR {
				return idCount{}, os.NewSyscallError("poll", err)
			}
			continue
		}
		if err != nil {
			return idCount{}, os.NewSyscallError("recvfrom", err)
		}
		sa, ok := from.(*unix.SockaddrInet4)
		probe := int(p.buf[0]>>1) & 7
		if !ok || n < 1 || n > probeLen || probe >= want || p.buf[0] != sel(probe) ||
			netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)) != src {
			continue // not a probe of this call's
		}
		if got[probe] == 0 {
			seen++
		}
		got[probe] = n
	}
	b := func(probe int) byte { return byte(got[probe] - 1) }
	v := uint16(b(0))<<8 | uint16(b(1)-1)
	if b(2) != byte((v+2)>>8) || b(3) != byte(v+3) {
		return idCount{}, fmt.Errorf("%w: probe IDs do not count up", errProbe)
	}
	c := idCount{known: true, next: v + 4}
	if gso {
		switch b(4) {
		case byte(v + 3):
			c.next = v + 4
		case byte(v + 4):
			c.next, c.perSeg = v+5, true
		default:
			return idCount{}, fmt.Errorf("%w: the ID after a super-packet is neither", errProbe)
		}
	}
	return c, nil
}

// drain discards whatever a failed learn left in the probe socket.
func (p *idProbe) drain() {
	for {
		if _, _, err := unix.Recvfrom(p.fd, p.buf[:], unix.MSG_DONTWAIT); err != nil {
			return
		}
	}
}

// idGuessSlots is the size of idGuess's table, a power of 2: peers whose
// slots collide take turns, each costing the other an ID recovery. 4096
// slots of 16 bytes keep the flows of 1024 QPs from one peer mostly
// apart (a 64-slot table recovered a quarter of their datagrams' IDs).
const (
	idGuessBits  = 12
	idGuessSlots = 1 << idGuessBits
)

// idGuess predicts the IPv4 ID of each peer's next datagram, so that the
// receiver checks its ICRC with the right ID at once rather than
// recovering the ID (wire.IPv4IDFromDelta, a second pass of arithmetic). How a sender's
// IDs go on is learned from the last two datagrams of each peer: always
// 0 (an unconnected socket with DF), one per datagram (a connected Linux
// socket, super-packet or not), or one per packet (rxe; kernels that give
// a super-packet one per segment). A wrong guess costs the recovery, not
// the packet.
type idGuess struct{ slots [idGuessSlots]idSlot }

type idSlot struct {
	key        uint64 // idKey of the peer; 0: empty
	base, last uint16 // the IDs of the last datagram's first and last segments
	step       idStep
}

// idStep is how a peer's IDs go on from one datagram to the next.
type idStep uint8

const (
	stepZero idStep = iota // every datagram starts at 0
	stepMsg                // the last datagram's first ID + 1
	stepSeg                // the last datagram's last ID + 1
)

// idKey packs an IPv4 peer's address and port, never 0.
func idKey(peer netip.AddrPort) uint64 {
	a := peer.Addr().As4()
	return 1<<48 | uint64(binary.BigEndian.Uint32(a[:]))<<16 | uint64(peer.Port())
}

func (g *idGuess) slot(key uint64) *idSlot {
	return &g.slots[(key*0x9e3779b97f4a7c15)>>(64-idGuessBits)]
}

// next returns the ID peer's next datagram most likely starts with.
func (g *idGuess) next(peer netip.AddrPort) uint16 {
	if !peer.Addr().Is4() {
		return 0
	}
	key := idKey(peer)
	s := g.slot(key)
	if s.key != key {
		return 0
	}
	switch s.step {
	case stepMsg:
		return s.base + 1
	case stepSeg:
		return s.last + 1
	}
	return 0
}

// note records a datagram from peer whose segments carried IDs base to
// last.
func (g *idGuess) note(peer netip.AddrPort, base, last uint16) {
	if !peer.Addr().Is4() {
		return
	}
	key := idKey(peer)
	s := g.slot(key)
	switch {
	case s.key != key:
		*s = idSlot{key: key, step: stepSeg}
		if base == 0 {
			s.step = stepZero
		}
	case base == 0:
		s.step = stepZero
	case base == s.base+1 && base == s.last+1:
		// After a single datagram both rules fit: keep the one that
		// has been right.
		if s.step == stepZero {
			s.step = stepSeg
		}
	case base == s.base+1:
		s.step = stepMsg
	case base == s.last+1:
		s.step = stepSeg
	}
	s.base, s.last = base, last
}
