package udp

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"unsafe"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/stats"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/stamp"
)

// UDP segmentation offload (UDP_SEGMENT, "GSO") and receive aggregation
// (UDP_GRO), Linux 5.0 and later.
//
// Send: WriteBatch groups each run of consecutive packets that go from one
// source port to one destination and have one size (the last may be
// shorter) into one message: an I/O vector per packet (no copy) and a
// UDP_SEGMENT control message carrying the size. The kernel moves the run
// as one super-packet as far as it can: on loopback and veth to the
// receiving socket; elsewhere it segments it, at the latest on a device
// without UDP segmentation offload (a tap to a QEMU guest), back into the
// original datagrams. The runs of one WriteBatch still go in one sendmmsg.
//
// The IPv4 ID of the segments: segmentation gives segment k of a
// super-packet the ID base+k, and base is 0 for an unconnected socket with
// DF set (the kernel's ip_select_ident_segs), the socket counter's next value for a
// connected one (idprobe_linux.go; both measured through a tun device by
// TestGSOSegmentIDs). So segment k gets its ICRC over ID base+k, which is
// what a receiver that sees the real IP header (rxe) checks.
//
// Receive: with UDP_GRO a socket gets a super-packet whole, with a control
// message giving the segment size, if it arrives unsegmented; otherwise,
// and for every socket without UDP_GRO, the kernel segments it before
// queuing (same IDs). ReadBatch reads up to groSlots datagrams into
// 64 KiB buffers of its own, splits them, and copies each packet into
// the caller's buffer. The ID of segment k is unknown to a UDP socket; it
// is checked first with the ID the peer's earlier datagrams predict for
// the first segment (idGuess) and the previous segment's ID plus 1 for
// the others; only a packet for which that fails costs an ID recovery
// (wire.IPv4IDFromDelta).
//
// Cost of the scheme: a socket with SO_NO_CHECK cannot send UDP_SEGMENT
// (the kernel answers EINVAL), so a link with GSO sends IPv4 datagrams
// with a UDP checksum, unlike rxe, which sends 0. The ICRC masks the
// checksum field, so the RoCE packets are the same; Config.NoGSO gives
// checksum 0 back.

// gsoSupport reports whether the kernel offers UDP_SEGMENT and UDP_GRO,
// probed once on a throwaway socket.
var gsoSupport = sync.OnceValue(func() bool {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		if err != nil {
			return false
		}
	}
	defer unix.Close(fd)
	if _, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT); err != nil {
		return false
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
})

// setMsg makes message j send the I/O vectors iovs[i:i+nv] to a: segs
// packets, as one super-packet of segments of segSize bytes if segs is more
// than 1.
func (m *mmsg) setMsg(j, i, nv, segs int, a netip.AddrPort, scope uint32, segSize int) {
	m.setName(j, a, scope)
	h := &m.hs[j].hdr
	h.Iov = &m.iovs[i]
	h.SetIovlen(nv)
	m.segs[j] = uint8(segs)
	if segs == 1 {
		h.Control = nil
		h.SetControllen(0)
		return
	}
	b := m.ctls[j].segmentSize(segSize)
	h.Control = &b[0]
	h.SetControllen(len(b))
}

// segmentSize writes into c a UDP_SEGMENT control message giving segSize,
// and returns it.
func (c *ctlBuf) segmentSize(segSize int) []byte {
	b := unsafe.Slice((*byte)(unsafe.Pointer(c)), len(c)*8)[:unix.CmsgSpace(2)]
	clear(b)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], uint16(segSize))
	return b
}

// connected makes message j leave without an address, by its socket's
// connected route (setMsg gave it one), if conn is true.
func (m *mmsg) connected(j int, conn bool) {
	if conn {
		m.hs[j].hdr.Namelen = 0
	}
}

// rxMeta returns what the control messages of received message i say:
// whether it arrived marked ECN CE (IP_TOS, IPV6_TCLASS), the segment
// size of a GRO super-packet (UDP_GRO; 0 for a single datagram), and the
// datagrams the socket had dropped by the time this one was queued
// (SO_RXQ_OVFL; the kernel sends it only once there are any).
func (m *mmsg) rxMeta(i int) (ce bool, segSize int, drops uint32) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&m.ctls[i])), len(m.ctls[i])*8)
	b = b[:min(int(m.hs[i].hdr.Controllen), len(b))]
	for len(b) >= unix.SizeofCmsghdr {
		c := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		n := int(c.Len)
		if n < unix.CmsgLen(0) || n > len(b) {
			break
		}
		data := b[unix.CmsgLen(0):n]
		switch {
		case c.Level == unix.IPPROTO_IP && c.Type == unix.IP_TOS && len(data) >= 1:
			ce = data[0]&ecnMask == ecnCE
		case c.Level == unix.IPPROTO_IPV6 && c.Type == unix.IPV6_TCLASS && len(data) >= 4:
			ce = binary.NativeEndian.Uint32(data)&ecnMask == ecnCE
		case c.Level == unix.IPPROTO_UDP && c.Type == unix.UDP_GRO && len(data) >= 4:
			segSize = int(binary.NativeEndian.Uint32(data))
		case c.Level == unix.SOL_SOCKET && c.Type == unix.SO_RXQ_OVFL && len(data) >= 4:
			drops = binary.NativeEndian.Uint32(data)
		}
		b = b[min(unix.CmsgSpace(n-unix.CmsgLen(0)), len(b)):]
	}
	return ce, segSize, drops
}

// groReader is the receive state of a link with UDP_GRO: the buffers the
// kernel writes into and the datagram being split. Its owner serializes
// its use (UDP.readMu).
type groReader struct {
	arena []byte // groSlots buffers of groBufSize bytes

	k, next int // datagrams in the buffers; the next one to split

	// The datagram being split (valid while off > 0).
	data   []byte
	peer   netip.AddrPort
	ce     bool
	seg    int    // segment size
	off    int    // bytes of data already split
	nextID uint16 // the IPv4 ID the next segment most likely carries

	// The IDs of the datagram's first and last good segments, for
	// UDP.rxIDs once the next datagram starts (seen: there was one).
	base, last uint16
	seen       bool
}

// readGRO is ReadBatch (PollBatch, with wait false; ReadLent, with lend)
// for a link with UDP_GRO; u.rd is held. It returns the packets left from the
// datagrams of an earlier call first, and reads more only when none are
// left.
func (u *Link) readGRO(pkts []link.Packet, wait, lend bool) (int, error) {
	g, m := u.rd.gro, u.rd.m
	if g.arena == nil {
		g.arena = make([]byte, groSlots*groBufSize)
		for i := range groSlots {
			m.setBuf(i, g.arena[i*groBufSize:(i+1)*groBufSize])
		}
	}
	for {
		if g.off == 0 && g.next >= g.k {
			k, err := u.recv(groSlots, wait)
			if k == 0 || err != nil { // without wait, or interrupted
				return 0, err
			}
			g.k, g.next = k, 0
		}
		c := rxTally{flow: u.rd.fromFlow}
		n := 0
		for n < len(pkts) && (g.off > 0 || g.next < g.k) {
			if g.off == 0 && !u.startDatagram(g, m, &c) {
				continue
			}
			seg := g.data[g.off:min(g.off+g.seg, len(g.data))]
			g.off += len(seg)
			if g.off == len(g.data) {
				g.off = 0
			}
			id := g.nextID
			g.nextID++
			p := &pkts[n]
			switch {
			case len(seg) < link.MinPacket:
				c.Malformed++
				continue
			case len(seg) > link.MaxPacket, !lend && len(seg) > cap(p.Buf):
				c.Oversized++
				continue
			}
			pkt := seg[:len(seg):len(seg)]
			if !lend {
				p.Buf = p.Buf[:len(seg)]
				copy(p.Buf, seg)
				pkt = p.Buf
			}
			got, ok := link.CheckICRCID(g.peer, u.laddr, pkt, id, &u.rd.hdr)
			if !ok {
				c.ICRC++
				continue
			}
			p.Lent = nil
			if lend {
				p.Lent = pkt
			}
			if got != id && g.peer.Addr().Is4() {
				c.Recovered++
			}
			g.nextID = got + 1
			if !g.seen {
				g.base, g.seen = got, true
			}
			g.last = got
			p.Peer, p.CE, p.SrcPort, p.ICRCPending = g.peer, g.ce, 0, false
			c.Packets++
			c.Bytes += uint64(len(seg))
			n++
		}
		u.addRx(&c)
		if n > 0 {
			stamp.Mark(stamp.LinkRead)
			return n, nil
		}
	}
}

// startDatagram takes the next datagram the kernel wrote, g.next, for
// splitting, and reports whether it has packets to split; a datagram that
// cannot be split is counted and skipped.
func (u *Link) startDatagram(g *groReader, m *mmsg, c *rxTally) bool {
	i := g.next
	g.next++
	c.datagrams++
	// Truncation cannot happen with 64 KiB buffers, but a length past them
	// is never trusted; segments too short are counted as they are split.
	size, peer, ce, seg, ok := u.datagram(m, i, 1, c)
	if !ok {
		return false
	}
	if seg <= 0 || seg > size {
		seg = size // a single datagram
	}
	if g.seen {
		u.rd.ids.note(g.peer, g.base, g.last)
	}
	g.data = g.arena[i*groBufSize : i*groBufSize+size]
	g.peer, g.ce, g.seg, g.nextID, g.seen = peer, ce, seg, u.rd.ids.next(peer), false
	return true
}

// A lone message, the one datagram of a write, leaves by sendto(2) where
// it can, not by sendmmsg: the kernel then has no message header to copy
// in and no control message to parse, and on this kind of VM, where every
// copy from user memory costs, that is a good part of a small datagram's
// send (docs/design/tuning.md#lone-sends). It takes a
// connected port socket (no address) and one I/O vector. A super-packet's
// segment size is then the socket's own UDP_SEGMENT option: set with
// setsockopt once two lone super-packets in a row have had that size (a
// ping-pong's WRITE and the ACK riding with it keep theirs), and kept
// while they keep it. Once the option is set every message sendmmsg sends
// from the socket carries its own UDP_SEGMENT control message, 0 for a
// plain datagram (plainSegments), which overrides the option
// (udp_cmsg_send); a plain datagram leaves by sendto only if it is no
// larger than the option's size, which the kernel sends whole
// (udp_send_skb segments only a datagram longer than the size). The ID
// probe, which sends plain datagrams, clears the option first
// (connectPort), and so does a link that stops sending super-packets
// (sendPlain). A link with faults sends by its fault stage alone, which
// never sets the option.

// loneSend reports whether message 0 of m, the only one of a write from
// ps's socket rc (nil ps: the link's own), can leave by sendto; segSize is
// its segment size if it is a super-packet. It sets the socket's
// UDP_SEGMENT option when that is worth a system call.
func (u *Link) loneSend(rc *sockFD, ps *portSocket, m *mmsg, segSize int) bool {
	h := &m.hs[0].hdr
	if ps == nil || h.Namelen != 0 || h.Iovlen != 1 || h.Iov == nil {
		return false
	}
	if m.segs[0] == 1 {
		return ps.seg == 0 || uint64(h.Iov.Len) <= uint64(ps.seg)
	}
	seg := uint16(segSize)
	if seg == ps.seg {
		return true
	}
	last := ps.lastSeg
	ps.lastSeg = seg
	if seg != last || ps.noSeg {
		return false
	}
	if m.setSegment(rc, int(seg)) != nil {
		ps.noSeg = true // and the option is as it was
		return false
	}
	ps.seg = seg
	u.stats.Inc(stats.SegmentOptions)
	return true
}

// plainSegments gives each plain datagram among messages 0..n-1 a
// UDP_SEGMENT control message of 0, so that the socket's option does not
// segment it.
func (m *mmsg) plainSegments(n int) {
	for j := range n {
		if m.segs[j] == 1 {
			b := m.ctls[j].segmentSize(0)
			h := &m.hs[j].hdr
			h.Control = &b[0]
			h.SetControllen(len(b))
		}
	}
}

// conn returns the peer ps's socket is connected to (invalid: unconnected,
// or nil ps: the link's own socket).
func (ps *portSocket) conn() netip.AddrPort {
	if ps == nil {
		return netip.AddrPort{}
	}
	return ps.peer
}

// idCounter returns the IPv4 ID counter of ps's connected socket (nil:
// IDs are 0, for an unconnected socket, IPv6, or nil ps).
func (ps *portSocket) idCounter() *idCount {
	if c := ps.conn(); !c.IsValid() || !c.Addr().Is4() {
		return nil
	}
	return &ps.ids
}
