package capture

import (
	"encoding/binary"

	"github.com/goroce/goroce/internal/wire"
)

// SplitGSO returns the datagrams d stands for: d itself, unless d is a UDP
// GSO super-packet of RoCEv2 packets that the capture saw whole (on
// loopback or a veth the kernel does not segment it), in which case it
// returns the segments the kernel makes of it wherever it does: d's
// headers with their lengths fixed and, for IPv4, the identification of
// segment k incremented by k, each with its share of the payload.
//
// The segment size is not in the capture. It is found as the one size
// (a multiple of 4, as every RoCEv2 packet's is) for which every segment
// carries a correct ICRC over its own headers; a datagram whose payload
// already does is taken as one packet. A d that no size explains is
// returned alone. The segments' IP slices are new memory.
func SplitGSO(d Datagram) []Datagram {
	if d.Malformed != nil || len(d.Payload) < wire.BTHLen+wire.ICRCLen {
		return []Datagram{d}
	}
	if c, s, err := wire.ICRCOfIP(d.IP); err == nil && c == s {
		return []Datagram{d}
	}
	hdr := d.IPHeaderLen + 8
	var buf []byte
	for size := wire.BTHLen + wire.ICRCLen; size < len(d.Payload); size += 4 {
		if len(d.Payload) > 64*size { // the kernel's UDP_MAX_SEGMENTS
			continue
		}
		var segs []Datagram
		for k, off := 0, 0; off < len(d.Payload); k, off = k+1, off+size {
			n := min(size, len(d.Payload)-off)
			buf = append(buf[:0], d.IP[:hdr]...)
			buf = append(buf, d.Payload[off:off+n]...)
			setLengths(buf, d.IPHeaderLen, d.IPv6, n, k)
			if c, s, err := wire.ICRCOfIP(buf); err != nil || c != s {
				segs = nil
				break
			}
			seg := d
			seg.IP = append([]byte(nil), buf...)
			seg.Payload = seg.IP[hdr:]
			segs = append(segs, seg)
		}
		if segs != nil {
			return segs
		}
	}
	return []Datagram{d}
}

// setLengths makes ip, headers of ipHeaderLen bytes then UDP, a datagram of
// n payload bytes, segment k of a super-packet.
func setLengths(ip []byte, ipHeaderLen int, v6 bool, n, k int) {
	binary.BigEndian.PutUint16(ip[ipHeaderLen+4:], uint16(8+n))
	if v6 {
		binary.BigEndian.PutUint16(ip[4:], uint16(ipHeaderLen-40+8+n))
		return
	}
	binary.BigEndian.PutUint16(ip[2:], uint16(ipHeaderLen+8+n))
	binary.BigEndian.PutUint16(ip[4:], binary.BigEndian.Uint16(ip[4:])+uint16(k))
}
