package wire

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/goroce/goroce/internal/fastcrc"
)

// The RoCEv2 invariant CRC (IBA Annex A17.3.3, Linux rxe_icrc.c) is the
// Ethernet CRC-32 of
//
//	8 bytes of 0xff                 standing in for the InfiniBand LRH
//	the IP header                   IPv4: TOS, TTL and header checksum set to all ones;
//	                                IPv6: traffic class, flow label and hop limit all ones
//	the UDP header                  checksum set to 0xffff
//	the BTH                         byte 4 (FECN, BECN, resv6a) set to 0xff
//	the rest of the packet          extended headers, payload, pad
//
// stored after the packet in little-endian byte order. The masked fields are
// the ones routers may rewrite in flight.

// lrhLen is the length of the LRH's stand-in, the 0xff bytes the ICRC
// starts with.
const lrhLen = 8

// maxPrefix is the longest run of bytes the ICRC covers ahead of the BTH's
// unmasked tail: the LRH's stand-in, an IPv4 header with options (60), the
// UDP header and the BTH (12).
const maxPrefix = lrhLen + 60 + UDPLen + BTHLen

// The stand-in and the masked headers are put together in a stack array and
// fed to the CRC by fastcrc.UpdateShort, which does not let the array escape
// to the heap. With the stand-in the prefix is a multiple of 16 bytes for
// IPv4 (48), which the vector code takes whole, where the 40 bytes after it
// left 8 to a slower loop. The rest of the packet, already in memory the
// caller owns, goes through fastcrc.Update: carry-less multiplication with
// four 512-bit accumulators where the CPU has AVX-512, four 256-bit ones
// where it has AVX2 and VPCLMULQDQ, and hash/crc32 elsewhere.

// crcFeed advances a CRC-32 register (not inverted) over p.
func crcFeed(r uint32, p []byte) uint32 { return ^fastcrc.UpdateShort(^r, p) }

// icrcWith finishes the ICRC: prefix holds the LRH's stand-in and the
// masked IP and UDP headers followed by the packet's BTH; the rest of pkt
// follows.
func icrcWith(prefix []byte, pkt []byte) uint32 {
	return fastcrc.Update(prefixCRC(prefix), pkt[BTHLen:])
}

// prefixCRC returns the CRC-32 (in crc32.Update's form) of prefix, the
// LRH's stand-in and the masked IP and UDP headers followed by a BTH, whose
// byte 4 (FECN, BECN, resv6a) it masks.
func prefixCRC(prefix []byte) uint32 {
	prefix[len(prefix)-BTHLen+4] = 0xff
	return fastcrc.UpdateShort(0, prefix)
}

// putLRH writes the LRH's stand-in into b and returns its length.
func putLRH(b []byte) int {
	binary.NativeEndian.PutUint64(b, ^uint64(0))
	return lrhLen
}

// Errors returned by the ICRC functions.
var (
	ErrNotRoCE = errors.New("wire: not a RoCEv2 packet (IPv4 or IPv6 carrying UDP)")
	ErrIPShort = errors.New("wire: IP packet shorter than its headers")
)

// Lengths of the headers the ICRC covers ahead of the BTH.
const (
	IPv4Len = 20
	IPv6Len = 40
	UDPLen  = 8
	// UDPPort is the RoCEv2 destination port (IANA).
	UDPPort = 4791
)

// IPFields are the header fields the ICRC covers outside the InfiniBand
// packet, in the form a UDP socket knows them: addresses and ports from the
// socket, the IPv4 identification and flags from the sender's rules (see
// RecoverIPv4ID for the receive side). Src and Dst are both IPv4 or both IPv6.
type IPFields struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	ID               uint16 // IPv4 identification
	FlagsFrag        uint16 // IPv4 flags and fragment offset; 0x4000 is DF

	// Cache, if set, keeps the CRC of the headers ahead of the BTH for the
	// next packets of the same flow and length (HeaderCache): the ICRC of
	// a small packet then costs about three quarters as much. Its owner
	// serializes the computations that use it.
	Cache *HeaderCache
}

// DF is the IPv4 don't-fragment flag as it appears in IPFields.FlagsFrag.
const DF = 0x4000

// ICRC returns the invariant CRC of pkt (BTH through pad; a trailing ICRC,
// if present, must be excluded by the caller) sent with these IP and UDP
// header fields. pkt must hold at least a BTH. It does not allocate.
func (f *IPFields) ICRC(pkt []byte) uint32 {
	return fastcrc.Update(f.HeaderCRC(pkt), pkt[BTHLen:])
}

// shortPacket is the longest packet (BTH through pad) whose payload
// ICRCGather and ICRCCopy copy first and then checksum with the rest in one
// call, instead of checksumming the extended headers, the payload (as they
// copy it) and the pad in a call each: the vector CRC costs about as much
// for 16 bytes as for 128, so for a short packet the calls cost more than
// reading its payload twice. From about a kilobyte reading the payload
// twice costs more than the calls it saves.
// Chosen by measurement: docs/design/tuning.md#short-packet.
const shortPacket = 512

// ICRCCopy copies a packet (BTH through pad) given in three parts, head
// (at least the whole BTH), payload and tail (pad), one after the other
// into dst, and returns the packet's ICRC as ICRC does. It reads each part
// once: the copy rides on the CRC's loads (fastcrc.UpdateCopy), except in
// a packet of up to shortPacket bytes, copied first and then checksummed
// in dst, which costs less there. A link
// that sends through memory it shares with the receiver fills a slot and
// checksums it in one pass this way, the payload taken from where it lies
// (a gather) or in head with the rest. It does not allocate.
func (f *IPFields) ICRCCopy(dst, head, payload, tail []byte) uint32 {
	if n := len(head) + len(payload) + len(tail); n <= shortPacket {
		copy(dst, head)
		copy(dst[len(head):], payload)
		copy(dst[len(head)+len(payload):], tail)
		return f.ICRC(dst[:n])
	}
	c := f.headerCRC(head, len(head)+len(payload)+len(tail))
	copy(dst[:BTHLen], head)
	c = fastcrc.UpdateCopy(c, dst[BTHLen:len(head)], head[BTHLen:])
	c = fastcrc.UpdateCopy(c, dst[len(head):], payload)
	return fastcrc.UpdateCopy(c, dst[len(head)+len(payload):], tail)
}

// ICRCGather copies payload into pkt[split:split+len(payload)] and returns
// the ICRC of pkt (BTH through pad) as ICRC does, reading the payload once:
// the copy rides on the CRC's loads (fastcrc.UpdateCopy), except in a
// packet of up to shortPacket bytes, copied first and then checksummed in
// pkt, which costs less there. The headers
// (pkt[:split], at least the whole BTH) and the pad after the payload must
// already be in place. A link that sends a gathered packet through a socket
// puts it together in its buffer this way. It does not allocate.
func (f *IPFields) ICRCGather(pkt []byte, split int, payload []byte) uint32 {
	end := split + len(payload)
	if len(pkt) <= shortPacket {
		copy(pkt[split:end], payload)
		return f.ICRC(pkt)
	}
	c := f.HeaderCRC(pkt)
	c = fastcrc.Update(c, pkt[BTHLen:split])
	c = fastcrc.UpdateCopy(c, pkt[split:end], payload)
	return fastcrc.Update(c, pkt[end:])
}

// HeaderCRC returns the CRC-32 (in crc32.Update's form) of the masked IP
// and UDP headers and pkt's masked BTH: the start of pkt's ICRC, which
// Packet.DeferICRC takes to finish the check later. pkt is BTH through
// pad, as for ICRC.
func (f *IPFields) HeaderCRC(pkt []byte) uint32 { return f.headerCRC(pkt, len(pkt)) }

// headerCRC is HeaderCRC of a packet of n bytes (BTH through pad) that
// starts with bth.
func (f *IPFields) headerCRC(bth []byte, n int) uint32 {
	if c := f.Cache; c != nil {
		r := c.lookup(f, UDPLen+n+ICRCLen)
		if f.ID != 0 && f.Src.Is4() {
			r ^= idTerm[0][f.ID>>8] ^ idTerm[1][f.ID&0xff]
		}
		var b [BTHLen]byte
		copy(b[:], bth[:BTHLen])
		b[4] = 0xff // FECN, BECN, resv6a
		return fastcrc.UpdateShort(r, b[:])
	}
	var buf [maxPrefix]byte
	k := putLRH(buf[:])
	k += f.putHeaders(buf[k:], n+ICRCLen)
	k += copy(buf[k:k+BTHLen], bth)
	return prefixCRC(buf[:k])
}

// A HeaderCache keeps the CRC of the bytes an ICRC covers ahead of the
// BTH (the LRH's stand-in and the masked IP and UDP headers) for the last
// two flows and datagram lengths it was asked for, with IPv4 ID 0. They
// change only with the flow and the length, and the ID's share is added
// from a table (the CRC is linear in it, see RecoverIPv4ID): a link's
// sender or receiver, which sees runs of one flow, a ping-pong's two
// lengths (its WRITE and the ACK with it) or a bandwidth test's one,
// computes them once per run instead of once per packet (a 64-byte
// WRITE's ICRC: BenchmarkICRC). The zero value is an empty cache; it is
// not safe for concurrent use.
type HeaderCache struct {
	e    [2]cachedHeader
	last int // the entry found or filled last
}

type cachedHeader struct {
	src, dst     netip.Addr
	sport, dport uint16
	flags        uint16
	udpLen       int    // 0: empty
	crc          uint32 // crc32.Update form, IPv4 ID 0
}

// lookup returns the CRC (crc32.Update form) of the LRH's stand-in and
// the masked IP and UDP headers of f's flow with IPv4 ID 0, for a UDP
// datagram of udpLen bytes.
func (c *HeaderCache) lookup(f *IPFields, udpLen int) uint32 {
	for i := range c.e {
		e := &c.e[i]
		if e.udpLen == udpLen && e.sport == f.SrcPort && e.dport == f.DstPort &&
			e.flags == f.FlagsFrag && e.src == f.Src && e.dst == f.Dst {
			c.last = i
			return e.crc
		}
	}
	c.last ^= 1 // the entry not used last
	g := *f
	g.ID = 0
	var buf [maxPrefix - BTHLen]byte
	k := putLRH(buf[:])
	k += g.putHeaders(buf[k:], udpLen-UDPLen)
	c.e[c.last] = cachedHeader{src: f.Src, dst: f.Dst, sport: f.SrcPort, dport: f.DstPort,
		flags: f.FlagsFrag, udpLen: udpLen, crc: fastcrc.UpdateShort(0, buf[:k])}
	return c.e[c.last].crc
}

// idTerm is the IPv4 ID's share in the CRC of the LRH's stand-in and the
// masked IPv4 and UDP headers: idTerm[0][hi] ^ idTerm[1][lo] for ID
// hi<<8|lo, XORed into that CRC computed with ID 0.
var idTerm = func() (t [2][256]uint32) {
	const n = lrhLen + IPv4Len + UDPLen
	var zero [n]byte
	z := fastcrc.Update(0, zero[:])
	for i := range 2 {
		for v := range 256 {
			var m [n]byte
			m[lrhLen+4+i] = byte(v) // the ID: bytes 4 and 5 of the IPv4 header
			t[i][v] = fastcrc.Update(0, m[:]) ^ z
		}
	}
	return t
}()

// putHeaders writes the masked IP and UDP headers of a datagram whose UDP
// payload is udpPayloadLen bytes into b and returns their length.
func (f *IPFields) putHeaders(b []byte, udpPayloadLen int) int {
	udpLen := uint16(UDPLen + udpPayloadLen)
	var n int
	if f.Src.Is4() {
		h := b[:IPv4Len]
		h[0] = 0x45
		h[1] = 0xff // TOS, masked
		binary.BigEndian.PutUint16(h[2:], IPv4Len+udpLen)
		binary.BigEndian.PutUint16(h[4:], f.ID)
		binary.BigEndian.PutUint16(h[6:], f.FlagsFrag)
		h[8] = 0xff               // TTL, masked
		h[9] = 17                 // UDP
		h[10], h[11] = 0xff, 0xff // header checksum, masked
		s, d := f.Src.As4(), f.Dst.As4()
		copy(h[12:16], s[:])
		copy(h[16:20], d[:])
		n = IPv4Len
	} else {
		h := b[:IPv6Len]
		h[0], h[1], h[2], h[3] = 0x6f, 0xff, 0xff, 0xff // version 6; class and flow label masked
		binary.BigEndian.PutUint16(h[4:], udpLen)
		h[6] = 17   // UDP
		h[7] = 0xff // hop limit, masked
		s, d := f.Src.As16(), f.Dst.As16()
		copy(h[8:24], s[:])
		copy(h[24:40], d[:])
		n = IPv6Len
	}
	u := b[n : n+UDPLen]
	binary.BigEndian.PutUint16(u[0:], f.SrcPort)
	binary.BigEndian.PutUint16(u[2:], f.DstPort)
	binary.BigEndian.PutUint16(u[4:], udpLen)
	u[6], u[7] = 0xff, 0xff // checksum, masked
	return n + UDPLen
}

// ICRCOfIP returns the invariant CRC of a RoCEv2 packet given as its whole
// IP packet (IPv4 with any options, or IPv6 with UDP as the next header)
// through the end of the ICRC, and the ICRC value stored in it. It does not
// allocate.
func ICRCOfIP(ip []byte) (computed, stored uint32, err error) {
	ipLen, err := ipHeaderLen(ip)
	if err != nil {
		return 0, 0, err
	}
	if len(ip) < ipLen+UDPLen+BTHLen+ICRCLen {
		return 0, 0, ErrIPShort
	}
	var pre [maxPrefix]byte
	n := putLRH(pre[:])
	n += copy(pre[n:], ip[:ipLen+UDPLen+BTHLen])
	buf := pre[lrhLen:]
	if ip[0]>>4 == 4 {
		buf[1], buf[8], buf[10], buf[11] = 0xff, 0xff, 0xff, 0xff // TOS, TTL, checksum
	} else {
		buf[0] |= 0x0f // traffic class, flow label, hop limit
		buf[1], buf[2], buf[3], buf[7] = 0xff, 0xff, 0xff, 0xff
	}
	buf[ipLen+6], buf[ipLen+7] = 0xff, 0xff // UDP checksum
	end := len(ip) - ICRCLen
	return icrcWith(pre[:n], ip[ipLen+UDPLen:end]), binary.LittleEndian.Uint32(ip[end:]), nil
}

// ipHeaderLen checks that ip starts with an IPv4 or IPv6 header for UDP and
// returns the header's length.
func ipHeaderLen(ip []byte) (int, error) {
	if len(ip) < 1 {
		return 0, ErrIPShort
	}
	switch ip[0] >> 4 {
	case 4:
		n := int(ip[0]&0x0f) * 4
		if n < IPv4Len || len(ip) < n {
			return 0, ErrIPShort
		}
		if ip[9] != 17 {
			return 0, ErrNotRoCE
		}
		return n, nil
	case 6:
		if len(ip) < IPv6Len {
			return 0, ErrIPShort
		}
		if ip[6] != 17 {
			return 0, ErrNotRoCE
		}
		return IPv6Len, nil
	}
	return 0, ErrNotRoCE
}

// PutICRC stores an ICRC value in the last 4 bytes of pkt.
func PutICRC(pkt []byte, icrc uint32) {
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCLen:], icrc)
}

// StoredICRC reads the ICRC value in the last 4 bytes of pkt.
func StoredICRC(pkt []byte) uint32 {
	return binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:])
}
