package wire

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net/netip"
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

// icrcSeed is the CRC-32 register, before the final inversion, after the
// 8 bytes of 0xff.
var icrcSeed = ^crc32.ChecksumIEEE([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// crcReg is a CRC-32 register fed one byte at a time, for the ~40 bytes of
// masked headers. The bytes come from values, not from a scratch buffer:
// crc32.Update keeps a reference to its slice, so a stack buffer passed to
// it would move to the heap. The payload, already in memory the caller
// owns, goes through crc32.Update, which uses the CPU's CRC instructions.
type crcReg uint32

func (r *crcReg) byte1(b byte) { *r = crcReg(crc32.IEEETable[byte(*r)^b]) ^ *r>>8 }
func (r *crcReg) u16(v uint16) { r.byte1(byte(v >> 8)); r.byte1(byte(v)) }
func (r *crcReg) bytes(p []byte) {
	for _, b := range p {
		r.byte1(b)
	}
}

// finish feeds the BTH with its byte 4 masked and the rest of pkt, and
// returns the CRC.
func (r *crcReg) finish(pkt []byte) uint32 {
	if len(pkt) < BTHLen {
		r.bytes(pkt)
		return ^uint32(*r)
	}
	r.bytes(pkt[:4])
	r.byte1(0xff)
	return crc32.Update(^uint32(*r), crc32.IEEETable, pkt[5:])
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
}

// DF is the IPv4 don't-fragment flag as it appears in IPFields.FlagsFrag.
const DF = 0x4000

// ICRC returns the invariant CRC of pkt (BTH through pad; a trailing ICRC,
// if present, must be excluded by the caller) sent with these IP and UDP
// header fields. It does not allocate.
func (f *IPFields) ICRC(pkt []byte) uint32 {
	r := crcReg(icrcSeed)
	f.feedHeaders(&r, len(pkt)+ICRCLen)
	return r.finish(pkt)
}

// feedHeaders feeds the masked IP and UDP headers of a datagram whose UDP
// payload is udpPayloadLen bytes.
func (f *IPFields) feedHeaders(r *crcReg, udpPayloadLen int) {
	udpLen := uint16(UDPLen + udpPayloadLen)
	if f.Src.Is4() {
		r.byte1(0x45)
		r.byte1(0xff) // TOS, masked
		r.u16(IPv4Len + udpLen)
		r.u16(f.ID)
		r.u16(f.FlagsFrag)
		r.byte1(0xff) // TTL, masked
		r.byte1(17)   // UDP
		r.u16(0xffff) // header checksum, masked
		s, d := f.Src.As4(), f.Dst.As4()
		r.bytes(s[:])
		r.bytes(d[:])
	} else {
		r.byte1(0x6f) // version 6; traffic class and flow label masked
		r.byte1(0xff)
		r.u16(0xffff)
		r.u16(udpLen)
		r.byte1(17)   // UDP
		r.byte1(0xff) // hop limit, masked
		s, d := f.Src.As16(), f.Dst.As16()
		r.bytes(s[:])
		r.bytes(d[:])
	}
	r.u16(f.SrcPort)
	r.u16(f.DstPort)
	r.u16(udpLen)
	r.u16(0xffff) // UDP checksum, masked
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
	r := crcReg(icrcSeed)
	if ip[0]>>4 == 4 {
		r.byte1(ip[0])
		r.byte1(0xff) // TOS
		r.bytes(ip[2:8])
		r.byte1(0xff) // TTL
		r.byte1(ip[9])
		r.u16(0xffff) // header checksum
		r.bytes(ip[12:ipLen])
	} else {
		r.byte1(ip[0] | 0x0f) // traffic class and flow label
		r.byte1(0xff)
		r.u16(0xffff)
		r.bytes(ip[4:7])
		r.byte1(0xff) // hop limit
		r.bytes(ip[8:ipLen])
	}
	r.bytes(ip[ipLen : ipLen+6])
	r.u16(0xffff) // UDP checksum
	end := len(ip) - ICRCLen
	return r.finish(ip[ipLen+UDPLen : end]), binary.LittleEndian.Uint32(ip[end:]), nil
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
