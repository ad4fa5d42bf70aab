package udp

import "github.com/goroce/goroce/internal/link"

// The grouping of packets into UDP GSO super-packets; see gso_linux.go.

const (
	// maxSegments is the kernel's UDP_MAX_SEGMENTS (64 before Linux 6.11).
	maxSegments = 64

	// groBufSize is the size of one receive buffer: the largest UDP
	// payload (IPv6: 65535 - 8 bytes of UDP header) fits.
	groBufSize = 1 << 16

	// groSlots is how many datagrams (super-packets or single packets) one
	// recvmmsg reads when the link receives with UDP_GRO. Each takes a
	// 64 KiB buffer, 2 MiB in all, allocated on the first ReadBatch.
	groSlots = 32
)

// maxGSOBytes returns the largest UDP payload of one super-packet: the IP
// packet may not exceed 65535 bytes (IPv4, header included) or carry more
// than 65535 bytes after the fixed header (IPv6).
func maxGSOBytes(is6 bool) int {
	if is6 {
		return 65535 - 8
	}
	return 65535 - 20 - 8
}

// gsoRun returns how many packets from the front of pkts travel as one
// super-packet: consecutive packets with the first one's Peer and SrcPort
// whose sizes equal the first one's, the last of them possibly shorter; at
// most maxSegs packets and maxBytes bytes. It is 1 for a packet that goes
// alone, 0 for an empty pkts.
func gsoRun(pkts []link.Packet, maxSegs, maxBytes int) int {
	if len(pkts) == 0 {
		return 0
	}
	first := &pkts[0]
	size := first.Size()
	n, total := 1, size
	for n < len(pkts) && n < maxSegs {
		p := &pkts[n]
		l := p.Size()
		if l > size || total+l > maxBytes || p.Peer != first.Peer || p.SrcPort != first.SrcPort {
			break
		}
		total += l
		n++
		if l < size { // a shorter packet ends the run
			break
		}
	}
	return n
}

// SegmentIDs returns the IPv4 ID each of pkts carries when one WriteBatch
// of a link with GSO sends them (at most MaxBatch): segment k of a
// super-packet gets ID k, which its ICRC covers.
func SegmentIDs(pkts []link.Packet) []uint16 {
	ids := make([]uint16, len(pkts))
	for i := 0; i < len(pkts); {
		n := gsoRun(pkts[i:], maxSegments, maxGSOBytes(pkts[i].Peer.Addr().Is6()))
		for k := range n {
			ids[i+k] = uint16(k)
		}
		i += n
	}
	return ids
}
