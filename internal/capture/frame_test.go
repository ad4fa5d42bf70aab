package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

var (
	src4 = netip.MustParseAddr("198.18.0.2")
	dst4 = netip.MustParseAddr("198.18.0.3")
	src6 = netip.MustParseAddr("2001:db8::2")
	dst6 = netip.MustParseAddr("2001:db8::3")
)

const testSrcPort = 49152

// testPayload stands in for a RoCE BTH + payload + ICRC.
var testPayload = []byte("\x04\x40\xff\xff\x00\x00\x00\x11\x80\x00\x00\x01abcdefgh\x01\x02\x03\x04")

// ipv4UDP builds an IPv4 (DF set, no options) UDP datagram to port 4791.
func ipv4UDP(payload []byte) []byte {
	b := make([]byte, 28+len(payload))
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[6] = 0x40 // DF
	b[8] = 64
	b[9] = protoUDP
	copy(b[12:], src4.AsSlice())
	copy(b[16:], dst4.AsSlice())
	putUDP(b[20:], payload)
	return b
}

// ipv6UDP builds an IPv6 UDP datagram to port 4791, with extension headers
// between the fixed header and UDP. Each ext is the header type followed by
// the header itself, whose next-header byte is filled in here.
func ipv6UDP(payload []byte, ext ...[]byte) []byte {
	var b []byte
	b = append(b, 0x60, 0, 0, 0, 0, 0, protoUDP, 64)
	b = append(b, src6.AsSlice()...)
	b = append(b, dst6.AsSlice()...)
	prev := 6 // offset of the byte naming the next header
	for _, e := range ext {
		b[prev] = e[0]
		prev = len(b)
		b = append(b, e[1:]...)
		b[prev] = protoUDP
	}
	udp := len(b)
	b = append(b, make([]byte, 8+len(payload))...)
	putUDP(b[udp:], payload)
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)-40))
	return b
}

// putUDP writes a UDP header (checksum 0) and payload into b.
func putUDP(b, payload []byte) {
	binary.BigEndian.PutUint16(b[0:], testSrcPort)
	binary.BigEndian.PutUint16(b[2:], roceport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	copy(b[8:], payload)
}

// ether builds an Ethernet frame; tpids are VLAN tag types put before et.
func ether(et uint16, p []byte, tpids ...uint16) []byte {
	b := []byte{0x52, 0x54, 0, 0x12, 0, 3, 0x52, 0x54, 0, 0x12, 0, 2}
	for i, tp := range tpids {
		b = binary.BigEndian.AppendUint16(b, tp)
		b = binary.BigEndian.AppendUint16(b, uint16(100+i)) // PCP 0, VID
	}
	b = binary.BigEndian.AppendUint16(b, et)
	return append(b, p...)
}

// sll builds a Linux cooked (v1) frame.
func sll(et uint16, p []byte) []byte {
	b := []byte{0, 0, 0, 1, 0, 6, 0x52, 0x54, 0, 0x12, 0, 2, 0, 0}
	b = binary.BigEndian.AppendUint16(b, et)
	return append(b, p...)
}

// sll2 builds a Linux cooked v2 frame.
func sll2(et uint16, p []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, et)
	b = append(b, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6, 0x52, 0x54, 0, 0x12, 0, 2, 0, 0)
	return append(b, p...)
}

// null builds a BSD loopback frame with address family af.
func null(af uint32, order binary.AppendByteOrder, p []byte) []byte {
	return append(order.AppendUint32(nil, af), p...)
}

var arp = ether(0x0806, make([]byte, 28))

// tcp4 is an IPv4 TCP segment (header only).
func tcp4() []byte {
	b := ipv4UDP(make([]byte, 12))
	b[9] = 6
	return b
}

// pcapOf writes frames of link type lt as a classic pcap.
func pcapOf(t testing.TB, lt layers.LinkType, frames ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriterNanos(&buf)
	if err := w.WriteFileHeader(65535, lt); err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		if err := w.WritePacket(gopacket.CaptureInfo{CaptureLength: len(f), Length: len(f)}, f); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// datagrams reads every datagram of an in-memory capture.
func datagrams(t testing.TB, file []byte) []Datagram {
	t.Helper()
	r, err := NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	var out []Datagram
	for {
		d, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d.Clone())
	}
}

func TestLinkTypes(t *testing.T) {
	v4, v6 := ipv4UDP(testPayload), ipv6UDP(testPayload)
	tcp := tcp4()
	icmp6 := ipv6UDP(nil)
	icmp6[6] = 58
	tests := []struct {
		name      string
		lt        layers.LinkType
		skip, udp []byte // a frame that is not UDP, and the UDP frame
		ipv6      bool
		ip        []byte
		headerLen int
	}{
		{"ethernet", layers.LinkTypeEthernet, arp, ether(etherIPv4, v4), false, v4, 20},
		{"ethernet padded", layers.LinkTypeEthernet, arp, ether(etherIPv4, append(ipv4UDP(nil), make([]byte, 18)...)), false, ipv4UDP(nil), 20},
		{"ethernet ipv6", layers.LinkTypeEthernet, arp, ether(etherIPv6, v6), true, v6, 40},
		{"802.1Q", layers.LinkTypeEthernet, ether(etherIPv4, tcp, 0x8100), ether(etherIPv4, v4, 0x8100), false, v4, 20},
		{"802.1ad+802.1Q", layers.LinkTypeEthernet, arp, ether(etherIPv6, v6, 0x88a8, 0x8100), true, v6, 40},
		{"three tags", layers.LinkTypeEthernet, arp, ether(etherIPv4, v4, 0x9100, 0x88a8, 0x8100), false, v4, 20},
		{"sll", layers.LinkTypeLinuxSLL, sll(0x0806, make([]byte, 28)), sll(etherIPv4, v4), false, v4, 20},
		{"sll vlan", layers.LinkTypeLinuxSLL, sll(etherIPv4, tcp), sll(0x8100, append([]byte{0, 5, 0x86, 0xdd}, v6...)), true, v6, 40},
		{"sll2", layers.LinkTypeLinuxSLL2, sll2(etherIPv4, tcp), sll2(etherIPv6, v6), true, v6, 40},
		{"raw v4", layers.LinkTypeRaw, tcp, v4, false, v4, 20},
		{"raw v6", layers.LinkTypeRaw, tcp, v6, true, v6, 40},
		{"ipv4", layers.LinkTypeIPv4, tcp, v4, false, v4, 20},
		{"ipv6", layers.LinkTypeIPv6, icmp6, v6, true, v6, 40},
		{"null le", layers.LinkTypeNull, null(2, binary.LittleEndian, tcp), null(2, binary.LittleEndian, v4), false, v4, 20},
		{"null be inet6 darwin", layers.LinkTypeNull, null(7, binary.BigEndian, v4), null(30, binary.BigEndian, v6), true, v6, 40},
		{"null le inet6 freebsd", layers.LinkTypeNull, null(2, binary.LittleEndian, tcp), null(28, binary.LittleEndian, v6), true, v6, 40},
		{"loop", layers.LinkTypeLoop, null(2, binary.BigEndian, tcp), null(24, binary.BigEndian, v6), true, v6, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dgs := datagrams(t, pcapOf(t, tt.lt, tt.skip, tt.udp))
			if len(dgs) != 1 {
				t.Fatalf("got %d datagrams, want 1: %+v", len(dgs), dgs)
			}
			d := dgs[0]
			if d.Malformed != nil {
				t.Fatalf("Malformed: %v", d.Malformed)
			}
			checkConsistent(t, d)
			if d.Frame != 2 || d.IPv6 != tt.ipv6 || d.IPHeaderLen != tt.headerLen {
				t.Errorf("Frame %d IPv6 %v IPHeaderLen %d", d.Frame, d.IPv6, d.IPHeaderLen)
			}
			wantSrc, wantDst := src4, dst4
			if tt.ipv6 {
				wantSrc, wantDst = src6, dst6
			}
			if d.Src != wantSrc || d.Dst != wantDst || d.SrcPort != testSrcPort || d.DstPort != roceport {
				t.Errorf("%v:%d -> %v:%d", d.Src, d.SrcPort, d.Dst, d.DstPort)
			}
			if !bytes.Equal(d.IP, tt.ip) {
				t.Errorf("IP\n got % x\nwant % x", d.IP, tt.ip)
			}
			if !bytes.Equal(d.Payload, tt.ip[tt.headerLen+8:]) {
				t.Errorf("Payload % x", d.Payload)
			}
		})
	}
}

func TestExtensionHeaders(t *testing.T) {
	hbh := []byte{0, 0, 0, 1, 4, 0, 0, 0, 0}                               // PadN
	dstOpts := []byte{60, 0, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} // 16 bytes
	routing := []byte{43, 0, 0, 4, 0, 0, 0, 0, 0}                          // segments left 0
	atomic := []byte{44, 0, 0, 0, 0, 0, 0, 0, 1}                           // offset 0, M clear
	opts := ipv4UDP(testPayload)
	opts = append(append(opts[:20:20], 1, 1, 1, 0), opts[20:]...) // NOP NOP NOP EOL
	opts[0] = 0x46
	binary.BigEndian.PutUint16(opts[2:], uint16(len(opts)))
	tests := []struct {
		name      string
		ip        []byte
		headerLen int
	}{
		{"ipv4 options", opts, 24},
		{"hop-by-hop", ipv6UDP(testPayload, hbh), 48},
		{"hbh+routing+dstopts", ipv6UDP(testPayload, hbh, routing, dstOpts), 72},
		{"atomic fragment", ipv6UDP(testPayload, atomic), 48},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := decodeFrame(layers.LinkTypeRaw, tt.ip, false)
			if !ok || d.Malformed != nil {
				t.Fatalf("ok=%v Malformed=%v", ok, d.Malformed)
			}
			checkConsistent(t, d)
			if d.IPHeaderLen != tt.headerLen || !bytes.Equal(d.Payload, testPayload) {
				t.Errorf("IPHeaderLen %d Payload % x", d.IPHeaderLen, d.Payload)
			}
		})
	}
}

func TestSkipped(t *testing.T) {
	icmp := ipv4UDP(nil)
	icmp[9] = 1
	icmp6 := ipv6UDP(nil)
	icmp6[6] = 58
	tcpAfterHBH := ipv6UDP(nil, []byte{0, 0, 0, 1, 4, 0, 0, 0, 0})
	tcpAfterHBH[40] = 6
	esp := ipv6UDP(nil)
	esp[6] = 50
	fragTCP := ipv6UDP(nil, []byte{44, 0, 0, 0, 8, 0, 0, 0, 1}) // offset 1
	fragTCP[40] = 6
	tcpFrag4 := tcp4()
	tcpFrag4[6] = 0x20 // MF
	bigTCP4 := tcp4()
	bigTCP4[2], bigTCP4[3] = 0, 0 // Linux BIG TCP: total length 0
	tests := []struct {
		name  string
		lt    layers.LinkType
		frame []byte
	}{
		{"arp", layers.LinkTypeEthernet, arp},
		{"tcp", layers.LinkTypeEthernet, ether(etherIPv4, tcp4())},
		{"tcp big", layers.LinkTypeEthernet, ether(etherIPv4, bigTCP4)},
		{"tcp fragment", layers.LinkTypeEthernet, ether(etherIPv4, tcpFrag4)},
		{"icmp", layers.LinkTypeEthernet, ether(etherIPv4, icmp)},
		{"icmpv6", layers.LinkTypeEthernet, ether(etherIPv6, icmp6)},
		{"tcp after hop-by-hop", layers.LinkTypeEthernet, ether(etherIPv6, tcpAfterHBH)},
		{"esp", layers.LinkTypeEthernet, ether(etherIPv6, esp)},
		{"ipv6 fragment of tcp", layers.LinkTypeEthernet, ether(etherIPv6, fragTCP)},
		{"802.3 llc", layers.LinkTypeEthernet, ether(0x0026, []byte{0x42, 0x42, 3, 0, 0})},
		{"short ethernet", layers.LinkTypeEthernet, ether(etherIPv4, nil)[:13]},
		{"short vlan tag", layers.LinkTypeEthernet, ether(0x8100, []byte{0, 1})},
		{"short ipv4 tcp", layers.LinkTypeEthernet, ether(etherIPv4, tcp4()[:12])},
		{"short ipv6 icmpv6", layers.LinkTypeEthernet, ether(etherIPv6, icmp6[:20])},
		{"sll netlink", layers.LinkTypeLinuxSLL, sll(0x0010, ipv4UDP(nil))},
		{"short sll2", layers.LinkTypeLinuxSLL2, sll2(etherIPv4, nil)[:19]},
		{"null af unknown", layers.LinkTypeNull, null(17, binary.LittleEndian, ipv4UDP(nil))},
		{"short null", layers.LinkTypeNull, []byte{2, 0}},
		{"ipv4 link tcp", layers.LinkTypeIPv4, tcp4()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d, ok := decodeFrame(tt.lt, tt.frame, false); ok {
				t.Errorf("reported as datagram: %+v", d)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	good := ipv4UDP(testPayload)
	mod := func(b []byte, f func(b []byte)) []byte {
		b = append([]byte(nil), b...)
		f(b)
		return b
	}
	be16 := func(off int, v uint16) func([]byte) {
		return func(b []byte) { binary.BigEndian.PutUint16(b[off:], v) }
	}
	tests := []struct {
		name  string
		lt    layers.LinkType
		frame []byte
		want  error
		ports bool // SrcPort/DstPort still decoded
	}{
		{"total length beyond frame", layers.LinkTypeEthernet, ether(etherIPv4, mod(good, be16(2, uint16(len(good)+1)))), errIPLen, true},
		{"total length below IHL", layers.LinkTypeEthernet, ether(etherIPv4, mod(good, be16(2, 19))), errTotalLen, true},
		{"udp length too long", layers.LinkTypeEthernet, ether(etherIPv4, mod(good, be16(24, uint16(len(good))))), errUDPLen, true},
		{"udp length too short", layers.LinkTypeEthernet, ether(etherIPv4, mod(good, be16(24, 9))), errUDPLen, true},
		{"udp length below 8", layers.LinkTypeEthernet, ether(etherIPv4, mod(good, be16(24, 4))), errUDPLenBelow, true},
		{"no room for udp", layers.LinkTypeRaw, mod(good[:24], be16(2, 24)), errUDPShort, true},
		{"ihl 4", layers.LinkTypeEthernet, ether(etherIPv4, mod(good, func(b []byte) { b[0] = 0x44 })), errIHL, true},
		{"ihl beyond frame", layers.LinkTypeRaw, mod(good[:24], func(b []byte) { b[0] = 0x47 }), errIHL, true},
		{"v6 in ipv4 ethertype", layers.LinkTypeEthernet, ether(etherIPv4, ipv6UDP(testPayload)), errVersion, false},
		{"v4 in ipv6 ethertype", layers.LinkTypeEthernet, ether(etherIPv6, good), errVersion, false},
		{"v4 in ipv6 link", layers.LinkTypeIPv6, good, errVersion, false},
		{"raw version 5", layers.LinkTypeRaw, mod(good, func(b []byte) { b[0] = 0x55 }), errVersion, false},
		{"empty raw", layers.LinkTypeRaw, nil, errIPShort, false},
		{"ipv4 ethertype no ip", layers.LinkTypeEthernet, ether(etherIPv4, nil), errIPShort, false},
		{"short ipv4 udp", layers.LinkTypeEthernet, ether(etherIPv4, good[:16]), errIPShort, false},
		{"short ipv6 udp", layers.LinkTypeEthernet, ether(etherIPv6, ipv6UDP(nil)[:30]), errIPShort, false},
		{"ipv4 first fragment", layers.LinkTypeEthernet, ether(etherIPv4, mod(good, be16(6, 0x2000))), ErrFragment, true},
		{"ipv4 later fragment", layers.LinkTypeEthernet, ether(etherIPv4, mod(good, be16(6, 0x00b9))), ErrFragment, true},
		{"bad header checksum", layers.LinkTypeEthernet, ether(etherIPv4, mod(good, be16(10, 0x1234))), errChecksum, true},
		{"ihl 7, bad checksum", layers.LinkTypeEthernet, ether(etherIPv4, mod(withChecksum(good), func(b []byte) { b[0] = 0x47 })), errUDPLenBelow, true},
		{"ipv6 fragment", layers.LinkTypeRaw, ipv6UDP(testPayload, []byte{44, 0, 0, 0, 1, 0, 0, 0, 1}), ErrFragment, false},
		{"ipv6 payload length beyond frame", layers.LinkTypeRaw, mod(ipv6UDP(testPayload), be16(4, 200)), errIPLen, true},
		{"ipv6 payload length short", layers.LinkTypeRaw, mod(ipv6UDP(testPayload), be16(4, 12)), errUDPLen, true},
		{"ipv6 jumbogram", layers.LinkTypeRaw, mod(ipv6UDP(testPayload, []byte{0, 0, 0, 0xc2, 4, 0, 0, 1, 0}), be16(4, 0)), errExtHeader, false},
		{"ipv6 ext header past end", layers.LinkTypeRaw, mod(ipv6UDP(testPayload, []byte{0, 0, 0, 1, 4, 0, 0, 0, 0}), func(b []byte) { b[41] = 200 }), errExtHeader, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := decodeFrame(tt.lt, tt.frame, false)
			if !ok {
				t.Fatal("skipped, want Malformed")
			}
			if d.Malformed != tt.want {
				t.Errorf("Malformed = %v, want %v", d.Malformed, tt.want)
			}
			checkConsistent(t, d)
			if tt.ports != (d.DstPort == roceport) {
				t.Errorf("DstPort %d", d.DstPort)
			}
		})
	}
}

// withChecksum returns a copy of an IPv4 packet with its header checksum set.
func withChecksum(ip []byte) []byte {
	ip = append([]byte(nil), ip...)
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], ^ipv4Checksum(ip[:20]))
	return ip
}

func TestHeaderChecksum(t *testing.T) {
	ip := withChecksum(ipv4UDP(testPayload))
	if d, ok := decodeFrame(layers.LinkTypeRaw, ip, false); !ok || d.Malformed != nil {
		t.Errorf("correct checksum: ok=%v Malformed=%v", ok, d.Malformed)
	}
	for i := range 20 * 8 {
		if i/8 == 9 || i/8 == 0 && i%8 >= 4 { // protocol, version: the frame stops being IPv4 UDP
			continue
		}
		b := append([]byte(nil), ip...)
		b[i/8] ^= 1 << (i % 8)
		d, ok := decodeFrame(layers.LinkTypeRaw, b, false)
		if !ok || d.Malformed == nil || d.DstPort != roceport {
			t.Errorf("header byte %d bit %d flipped: ok=%v Malformed=%v DstPort=%d", i/8, i%8, ok, d.Malformed, d.DstPort)
		}
	}
}

func TestTruncatedCapture(t *testing.T) {
	frame := ether(etherIPv4, ipv4UDP(testPayload))
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	w.WriteFileHeader(40, layers.LinkTypeEthernet)
	for _, n := range []int{len(frame), 40, 30, 10} {
		ci := gopacket.CaptureInfo{CaptureLength: n, Length: len(frame)}
		if err := w.WritePacket(ci, frame[:n]); err != nil {
			t.Fatal(err)
		}
	}
	dgs := datagrams(t, buf.Bytes())
	// The 10-byte frame lacks even the ethertype and is skipped.
	if len(dgs) != 3 {
		t.Fatalf("got %d datagrams, want 3", len(dgs))
	}
	if dgs[0].Malformed != nil {
		t.Errorf("complete frame: Malformed %v", dgs[0].Malformed)
	}
	for _, d := range dgs[1:] {
		if !errors.Is(d.Malformed, ErrTruncated) || d.Malformed.Error() != "truncated capture" {
			t.Errorf("frame %d: Malformed %v, want truncated capture", d.Frame, d.Malformed)
		}
		checkConsistent(t, d)
	}
	if d := dgs[1]; d.Src != src4 || d.Dst != dst4 || d.DstPort != roceport || len(d.IP) != 26 || len(d.Payload) != 0 {
		t.Errorf("best-effort fields of the 40-byte capture: %+v", d)
	}
}
