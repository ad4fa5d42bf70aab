package capture

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/gopacket/gopacket/layers"
)

// Errors reported in Datagram.Malformed. ErrTruncated and ErrFragment may be
// tested with errors.Is; the others are descriptions.
var (
	// ErrTruncated means the captured length is less than the original
	// length (snaplen cut the frame). It takes precedence over any other problem,
	// since the missing bytes cause those.
	ErrTruncated = errors.New("truncated capture")
	// ErrFragment marks an IPv4 fragment (MF set or offset != 0) of a UDP
	// datagram, or an IPv6 fragment whose fragment header names UDP as next
	// header. Fragments are not reassembled.
	ErrFragment = errors.New("IP fragment")

	errVersion     = errors.New("IP version does not match the link-layer type")
	errIPShort     = errors.New("frame too short for the IP header")
	errIHL         = errors.New("bad IPv4 header length (IHL)")
	errTotalLen    = errors.New("IPv4 total length shorter than the header")
	errIPLen       = errors.New("IP length exceeds the captured frame")
	errExtHeader   = errors.New("IPv6 extension header runs past the payload")
	errUDPShort    = errors.New("IP payload too short for the UDP header")
	errUDPLen      = errors.New("UDP length does not match the IP payload length")
	errUDPLenBelow = errors.New("UDP length less than 8")
	errChecksum    = errors.New("bad IPv4 header checksum")
)

// Ethertypes and IP protocol numbers used here.
const (
	etherIPv4 = 0x0800
	etherIPv6 = 0x86dd
	protoUDP  = 17
)

// supported reports whether decodeFrame understands link type lt.
func supported(lt layers.LinkType) bool {
	switch lt {
	case layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2,
		layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6,
		layers.LinkTypeNull, layers.LinkTypeLoop:
		return true
	}
	return false
}

// ipEither is the version linkPayload returns for raw IP link types, where
// the IP version nibble decides.
const ipEither = -1

// linkPayload strips the link-layer header of a frame of type lt. It returns
// the bytes following it and the IP version the link layer announces, or
// version 0 if the frame is not IP or its link-layer header is incomplete.
func linkPayload(lt layers.LinkType, b []byte) (rest []byte, version int) {
	switch lt {
	case layers.LinkTypeEthernet:
		// destination MAC, source MAC, ethertype
		if len(b) < 14 {
			return nil, 0
		}
		return ethertypePayload(binary.BigEndian.Uint16(b[12:]), b[14:])
	case layers.LinkTypeLinuxSLL:
		// packet type, ARPHRD type, address length, 8 address bytes, protocol
		if len(b) < 16 {
			return nil, 0
		}
		return ethertypePayload(binary.BigEndian.Uint16(b[14:]), b[16:])
	case layers.LinkTypeLinuxSLL2:
		// protocol, reserved, interface index, ARPHRD type, packet type,
		// address length, 8 address bytes
		if len(b) < 20 {
			return nil, 0
		}
		return ethertypePayload(binary.BigEndian.Uint16(b[0:]), b[20:])
	case layers.LinkTypeRaw:
		return b, ipEither
	case layers.LinkTypeIPv4:
		return b, 4
	case layers.LinkTypeIPv6:
		return b, 6
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		// 4-byte address family: host byte order of the capturing machine
		// for NULL, big-endian for LOOP. Both orders are accepted for both.
		if len(b) < 4 {
			return nil, 0
		}
		af := binary.LittleEndian.Uint32(b)
		if af > 0xffff {
			af = binary.BigEndian.Uint32(b)
		}
		switch af {
		case 2: // AF_INET everywhere
			return b[4:], 4
		case 10, 24, 28, 30: // AF_INET6: Linux, OpenBSD/NetBSD, FreeBSD, Darwin
			return b[4:], 6
		}
	}
	return nil, 0
}

// ethertypePayload skips VLAN tags (802.1Q 0x8100, 802.1ad 0x88a8, 0x9100)
// starting at ethertype et followed by b, and maps the final ethertype to an
// IP version (0 if not IP).
func ethertypePayload(et uint16, b []byte) ([]byte, int) {
	for et == 0x8100 || et == 0x88a8 || et == 0x9100 {
		// tag control information, then the next ethertype
		if len(b) < 4 {
			return nil, 0
		}
		et = binary.BigEndian.Uint16(b[2:])
		b = b[4:]
	}
	switch et {
	case etherIPv4:
		return b, 4
	case etherIPv6:
		return b, 6
	}
	return nil, 0
}

// decodeFrame decodes one captured frame of link type lt. ok is false when
// the frame is not IPv4/IPv6 UDP; frames whose link layer announces IP but
// whose IP header is too short or of the wrong version to tell are returned
// with Malformed set. truncated reports that the capture cut the frame
// (captured length < original length). Frame and Time are left zero.
func decodeFrame(lt layers.LinkType, frame []byte, truncated bool) (d Datagram, ok bool) {
	b, version := linkPayload(lt, frame)
	if version == ipEither && len(b) > 0 {
		version = int(b[0] >> 4)
		if version != 4 && version != 6 {
			version = 4 // reported below as a version mismatch
		}
	}
	switch version {
	case 4:
		ok = decodeIPv4(&d, b)
	case 6:
		ok = decodeIPv6(&d, b)
	case ipEither: // raw IP, empty frame
		d.Malformed, ok = errIPShort, true
	}
	if ok && truncated {
		d.Malformed = ErrTruncated
	}
	return d, ok
}

// decodeIPv4 fills d from the IPv4 packet at the start of b (which may carry
// link-layer padding). It reports false if the packet is not UDP.
func decodeIPv4(d *Datagram, b []byte) bool {
	if len(b) == 0 {
		d.Malformed = errIPShort
		return true
	}
	if b[0]>>4 != 4 {
		d.Malformed = errVersion
		return true
	}
	if len(b) < 20 {
		if len(b) > 9 && b[9] != protoUDP {
			return false
		}
		d.Malformed = errIPShort
		return true
	}
	if b[9] != protoUDP {
		return false
	}
	d.Src = netip.AddrFrom4([4]byte(b[12:16]))
	d.Dst = netip.AddrFrom4([4]byte(b[16:20]))
	hl := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:]))
	frag := binary.BigEndian.Uint16(b[6:])
	switch {
	case hl < 20 || hl > len(b):
		d.IP, d.Malformed = b, errIHL
		bestEffortPorts(d, b[20:])
		return true
	case total < hl:
		d.IP, d.IPHeaderLen, d.Malformed = b[:hl], hl, errTotalLen
		bestEffortPorts(d, b[hl:])
		return true
	case total > len(b):
		d.Malformed = errIPLen
		total = len(b)
	}
	d.IP, d.IPHeaderLen = b[:total], hl
	// Linux computes the IPv4 header checksum in software, so a capture
	// shows the real one; zero is taken as "not computed".
	badSum := binary.BigEndian.Uint16(b[10:]) != 0 && ipv4Checksum(b[:hl]) != 0xffff
	if badSum {
		defer func() {
			if d.Malformed == nil {
				d.Malformed = errChecksum
			}
			if d.DstPort != roceV2Port {
				bestEffortPorts(d, b[20:]) // the IHL or a length may be the damage
			}
		}()
	}
	if frag&0x3fff != 0 { // MF flag or fragment offset
		d.Malformed = ErrFragment
		if frag&0x1fff != 0 { // no UDP header in this fragment
			bestEffortPorts(d, b[hl:])
			return true
		}
	}
	decodeUDP(d, int(binary.BigEndian.Uint16(b[2:]))-hl)
	return true
}

// decodeIPv6 fills d from the IPv6 packet at the start of b (which may carry
// link-layer padding). Hop-by-hop, routing and destination-options headers
// are walked, as are atomic fragment headers (offset 0, M clear); other
// fragments are ErrFragment when their fragment header names UDP as next
// header and skipped otherwise. Any other next header (TCP, ICMPv6, ESP,
// AH, ...) means the packet is skipped. It reports false if the packet is
// not UDP.
func decodeIPv6(d *Datagram, b []byte) bool {
	if len(b) == 0 {
		d.Malformed = errIPShort
		return true
	}
	if b[0]>>4 != 6 {
		d.Malformed = errVersion
		return true
	}
	if len(b) < 40 {
		if len(b) > 6 && !ipv6Chained(b[6]) {
			return false
		}
		d.Malformed = errIPShort
		return true
	}
	end := 40 + int(binary.BigEndian.Uint16(b[4:]))
	if end > len(b) {
		d.Malformed = errIPLen
		end = len(b)
	}
	next, off := b[6], 40
	for next != protoUDP {
		if !ipv6Chained(next) {
			return false
		}
		if off+8 > end { // every extension header is at least 8 bytes
			d.Malformed = errExtHeader
			break
		}
		n := 8
		if next == 44 { // fragment: offset and M flag in bytes 2-3
			if binary.BigEndian.Uint16(b[off+2:])&0xfff9 != 0 {
				if b[off] != protoUDP {
					return false
				}
				d.Malformed = ErrFragment
				break
			}
		} else {
			n = (int(b[off+1]) + 1) * 8
		}
		if off+n > end {
			d.Malformed = errExtHeader
			break
		}
		next, off = b[off], off+n
	}
	d.IPv6 = true
	d.Src = netip.AddrFrom16([16]byte(b[8:24]))
	d.Dst = netip.AddrFrom16([16]byte(b[24:40]))
	d.IP = b[:end]
	if next != protoUDP {
		return true // malformed extension header chain
	}
	d.IPHeaderLen = off
	decodeUDP(d, 40+int(binary.BigEndian.Uint16(b[4:]))-off)
	return true
}

// ipv6Chained reports whether next header value nh is UDP or an extension
// header decodeIPv6 walks through.
func ipv6Chained(nh byte) bool {
	switch nh {
	case protoUDP, 0, 43, 44, 60: // UDP, hop-by-hop, routing, fragment, destination options
		return true
	}
	return false
}

// decodeUDP fills the ports and Payload of d from the UDP header at
// d.IP[d.IPHeaderLen:]. ipPayloadLen is the IP payload length the IP header
// claims, which the UDP length must equal. It keeps an earlier Malformed.
func decodeUDP(d *Datagram, ipPayloadLen int) {
	udp := d.IP[d.IPHeaderLen:]
	var err error
	if len(udp) >= 4 {
		d.SrcPort = binary.BigEndian.Uint16(udp[0:])
		d.DstPort = binary.BigEndian.Uint16(udp[2:])
	}
	if len(udp) < 8 {
		err = errUDPShort
	} else {
		n := int(binary.BigEndian.Uint16(udp[4:]))
		switch {
		case n < 8:
			err, n = errUDPLenBelow, 8
		case n != ipPayloadLen:
			err = errUDPLen
		}
		d.Payload = udp[8:min(n, len(udp))]
	}
	if d.Malformed == nil {
		d.Malformed = err
	}
}

// bestEffortPorts reads the ports of a malformed datagram from where its
// UDP header would be, so that a RoCEv2 packet with a damaged IPv4 header
// can still be recognised by its destination port and reported.
func bestEffortPorts(d *Datagram, udp []byte) {
	if len(udp) >= 4 {
		d.SrcPort = binary.BigEndian.Uint16(udp[0:])
		d.DstPort = binary.BigEndian.Uint16(udp[2:])
	}
}

// roceV2Port is the RoCEv2 UDP destination port, the one best-effort port
// recovery looks for.
const roceV2Port = 4791

// ipv4Checksum returns the one's-complement sum of an IPv4 header; it is
// 0xffff when the header checksum is correct (RFC 1071).
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}
