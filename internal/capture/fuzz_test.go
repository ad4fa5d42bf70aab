package capture

import (
	"encoding/binary"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// within reports whether inner is a subslice of outer (nil is within anything).
func within(inner, outer []byte) bool {
	if len(inner) == 0 {
		return true
	}
	off := cap(outer) - cap(inner)
	return off >= 0 && off+len(inner) <= len(outer) && &outer[off] == &inner[0]
}

// checkConsistent checks the invariants of a datagram: Payload always lies
// within IP; without Malformed the headers agree with the lengths and the
// decoded fields.
func checkConsistent(t testing.TB, d Datagram) {
	t.Helper()
	if !within(d.Payload, d.IP) {
		t.Fatalf("Payload (%d bytes) not within IP (%d bytes)", len(d.Payload), len(d.IP))
	}
	if d.IPHeaderLen < 0 || d.IPHeaderLen > len(d.IP) {
		t.Fatalf("IPHeaderLen %d, IP %d bytes", d.IPHeaderLen, len(d.IP))
	}
	if d.Malformed != nil {
		return
	}
	ip, hl := d.IP, d.IPHeaderLen
	if len(ip) < hl+8 {
		t.Fatalf("IP %d bytes, header %d: no room for UDP", len(ip), hl)
	}
	if d.IPv6 {
		if ip[0]>>4 != 6 || hl < 40 || 40+int(binary.BigEndian.Uint16(ip[4:])) != len(ip) {
			t.Fatalf("IPv6 header inconsistent: % x (IP %d bytes, IPHeaderLen %d)", ip[:8], len(ip), hl)
		}
		if d.Src != netip.AddrFrom16([16]byte(ip[8:24])) || d.Dst != netip.AddrFrom16([16]byte(ip[24:40])) {
			t.Fatalf("addresses %v %v do not match header", d.Src, d.Dst)
		}
	} else {
		if ip[0]>>4 != 4 || int(ip[0]&15)*4 != hl || ip[9] != protoUDP ||
			int(binary.BigEndian.Uint16(ip[2:])) != len(ip) || binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			t.Fatalf("IPv4 header inconsistent: % x (IP %d bytes)", ip[:20], len(ip))
		}
		if d.Src != netip.AddrFrom4([4]byte(ip[12:16])) || d.Dst != netip.AddrFrom4([4]byte(ip[16:20])) {
			t.Fatalf("addresses %v %v do not match header", d.Src, d.Dst)
		}
	}
	udp := ip[hl:]
	if int(binary.BigEndian.Uint16(udp[4:])) != len(udp) || len(d.Payload) != len(udp)-8 || !within(d.Payload, udp[8:]) {
		t.Fatalf("UDP length %d, UDP %d bytes, payload %d", binary.BigEndian.Uint16(udp[4:]), len(udp), len(d.Payload))
	}
	if d.SrcPort != binary.BigEndian.Uint16(udp) || d.DstPort != binary.BigEndian.Uint16(udp[2:]) {
		t.Fatalf("ports %d %d do not match header", d.SrcPort, d.DstPort)
	}
}

// fuzzLinks are the link types FuzzDatagram chooses from.
var fuzzLinks = []layers.LinkType{
	layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeLinuxSLL2, layers.LinkTypeRaw,
	layers.LinkTypeIPv4, layers.LinkTypeIPv6, layers.LinkTypeNull, layers.LinkTypeLoop,
}

// goldenFrames returns up to perFile raw frames from each golden pcap.
func goldenFrames(t testing.TB, perFile int) [][]byte {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(pcapDir, "*.pcap"))
	var out [][]byte
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := pcapgo.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < perFile; n++ {
			data, _, err := pr.ReadPacketData()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, data)
		}
		f.Close()
	}
	return out
}

func FuzzDatagram(f *testing.F) {
	for i, fr := range goldenFrames(f, 6) {
		f.Add(uint8(0), fr, i%5 == 0)
		if len(fr) < 14 || (fr[12] != 0x08 && fr[12] != 0x86) {
			continue
		}
		et, ip := binary.BigEndian.Uint16(fr[12:]), fr[14:]
		switch i % 6 {
		case 0:
			f.Add(uint8(1), sll(et, ip), false)
		case 1:
			f.Add(uint8(2), sll2(et, ip), false)
		case 2:
			f.Add(uint8(3), ip, false)
		case 3:
			f.Add(uint8(6), null(2, binary.LittleEndian, ip), false)
		case 4:
			f.Add(uint8(0), ether(et, ip, 0x88a8, 0x8100), false)
		}
	}
	f.Add(uint8(3), ipv6UDP(testPayload, []byte{0, 0, 0, 1, 4, 0, 0, 0, 0}, []byte{44, 0, 0, 0, 0, 0, 0, 0, 1}), false)
	f.Fuzz(func(t *testing.T, link uint8, frame []byte, truncated bool) {
		d, ok := decodeFrame(fuzzLinks[int(link)%len(fuzzLinks)], frame, truncated)
		if !ok {
			return
		}
		if !within(d.IP, frame) {
			t.Fatalf("IP not within the frame")
		}
		if truncated && d.Malformed != ErrTruncated {
			t.Fatalf("truncated frame: Malformed %v", d.Malformed)
		}
		checkConsistent(t, d)
	})
}
