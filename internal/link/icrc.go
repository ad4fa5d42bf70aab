package link

import (
	"net/netip"

	"github.com/goroce/goroce/internal/wire"
)

// What every backend does to a packet's ICRC and shape, in one place.

// SendFields returns the header fields the ICRC of a packet sent from src
// to dst covers, with IPv4 ID 0: what an unconnected UDP socket with DF set
// sends (the kernel's ip_select_ident_segs gives a counter only to
// connected sockets; TestWireHeaders checks it on the wire), and goroce's
// links always set DF. A connected port socket's sends carry the ID its
// counter gives (link/udp: idprobe_linux.go).
func SendFields(src, dst netip.AddrPort) wire.IPFields {
	return wire.IPFields{
		Src: src.Addr(), Dst: dst.Addr(),
		SrcPort: src.Port(), DstPort: dst.Port(),
		ID: 0, FlagsFrag: wire.DF,
	}
}

// Size is the length of the packet p holds, gathered or not.
func (p *Packet) Size() int { return len(p.Buf) + len(p.Payload) }

// Sendable reports whether p is a packet a link sends: MinPacket to
// MaxPacket bytes, and a gathered payload placed after a whole BTH and
// before the ICRC's room. A path that cannot gather (gather false) takes
// only packets with their payload in Buf, which Flatten leaves every
// packet it can put together.
func (p *Packet) Sendable(gather bool) bool {
	n := p.Size()
	return n >= MinPacket && n <= MaxPacket &&
		(p.Payload == nil || gather && p.Split >= wire.BTHLen && p.Split <= len(p.Buf)-wire.ICRCLen)
}

// Flatten moves a gathered payload (Packet.Payload) into Buf. A packet
// that is not sendable, or whose Buf cannot hold it, is left as it is: the
// link's checks refuse it (ErrPacketSize).
func (p *Packet) Flatten() {
	if p.Payload == nil || !p.Sendable(true) || p.Size() > cap(p.Buf) {
		return
	}
	b := p.makeRoom()
	copy(b[p.Split:], p.Payload)
	p.Buf, p.Payload, p.Split = b, nil, 0
}

// makeRoom returns Buf grown to the whole packet, its tail (pad and ICRC
// room) moved after the room for the gathered payload.
func (p *Packet) makeRoom() []byte {
	b := p.Buf[:p.Size()]
	copy(b[p.Split+len(p.Payload):], p.Buf[p.Split:]) // the ranges overlap: copy moves
	return b
}

// FlattenICRC is Flatten and PutICRC in one pass over a gathered payload,
// which is copied into Buf while it is checksummed (wire.IPFields.
// ICRCGather): the payload is read once, from the MR, instead of copied and
// then read again. p must be sendable with a gathered payload, and Buf
// must have the capacity for the whole packet.
func (p *Packet) FlattenICRC(f *wire.IPFields) {
	if p.Payload == nil {
		PutICRC(p.Buf, f)
		return
	}
	b := p.makeRoom()
	wire.PutICRC(b, f.ICRCGather(b[:len(b)-wire.ICRCLen], p.Split, p.Payload))
	p.Buf, p.Payload, p.Split = b, nil, 0
}

// FlattenInto puts p together in dst, which must hold p.Size() bytes,
// with its ICRC, reading a gathered payload once (wire.IPFields.
// ICRCGather), and returns the packet's length. p is left as it was.
func (p *Packet) FlattenInto(dst []byte, f *wire.IPFields) int {
	n := p.Size()
	b := dst[:n]
	body := b[:n-wire.ICRCLen]
	if p.Payload == nil {
		copy(b, p.Buf)
		wire.PutICRC(b, f.ICRC(body))
		return n
	}
	copy(b, p.Buf[:p.Split])
	copy(b[p.Split+len(p.Payload):], p.Buf[p.Split:])
	wire.PutICRC(b, f.ICRCGather(body, p.Split, p.Payload))
	return n
}

// PutICRC fills the ICRC of pkt (BTH through ICRC, len >= MinPacket).
func PutICRC(pkt []byte, f *wire.IPFields) {
	body := pkt[:len(pkt)-wire.ICRCLen]
	wire.PutICRC(pkt, f.ICRC(body))
}

// CheckICRC reports whether pkt (BTH through ICRC, len >= MinPacket)
// carries a correct ICRC for a datagram from src to dst.
//
// IPv6: the socket knows every field the ICRC covers, so the check is the
// full 32-bit CRC.
//
// IPv4: the socket does not see the IP identification, which rxe fills
// from a counter, so the packet is accepted if some ID makes its ICRC right
// (wire.RecoverIPv4ID; a random corruption then survives with probability
// 2^-16, see docs/WIRE.md). The flags are assumed to be DF with fragment
// offset 0: rxe and goroce both set DF, and a fragment never reaches a UDP
// socket unreassembled.
//
// ID 0, what an unconnected sender puts in a single datagram, is tried
// first: that costs one CRC, and recovery runs only when it is wrong. The
// UDP link's reads, which meet connected senders and rxe too, predict the
// ID per peer (CheckICRCID).
//
// c, if not nil, is the caller's wire.HeaderCache.
func CheckICRC(src, dst netip.AddrPort, pkt []byte, c *wire.HeaderCache) bool {
	_, ok := CheckICRCID(src, dst, pkt, 0, c)
	return ok
}

// CheckICRCID is CheckICRC for a packet that most likely carries IPv4 ID
// want (the peer's next ID, or the one after the previous segment's in a
// super-packet): that ID costs one CRC, any other a recovery on top. It
// returns the ID that makes the ICRC right (IPv4; 0 for IPv6).
func CheckICRCID(src, dst netip.AddrPort, pkt []byte, want uint16, c *wire.HeaderCache) (id uint16, ok bool) {
	f := SendFields(src, dst)
	f.Cache = c
	is4 := f.Src.Is4()
	if is4 {
		f.ID = want
	}
	body := pkt[:len(pkt)-wire.ICRCLen]
	delta := f.ICRC(body) ^ wire.StoredICRC(pkt)
	if delta == 0 {
		return f.ID, true
	}
	if !is4 {
		return 0, false
	}
	// The CRC is linear in the ID: delta is the contribution of the
	// ID's difference from want, no second CRC over the packet needed.
	e, ok := wire.IPv4IDFromDelta(len(body), delta)
	return want ^ e, ok
}

// Plain returns a with an IPv4-mapped address unmapped and any zone
// removed, the form the ICRC and comparisons use.
func Plain(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap().WithZone(""), a.Port())
}
