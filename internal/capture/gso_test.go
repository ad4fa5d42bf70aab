package capture

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/wire"
)

// superPacket builds the IPv4 datagram a loopback capture sees for a GSO
// super-packet of packets with the given payload sizes, each with the
// ICRC of its segment's headers (segment k: IP ID k).
func superPacket(t *testing.T, sizes []int) (Datagram, [][]byte) {
	t.Helper()
	src, dst := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	var pkts [][]byte
	var payload []byte
	for k, n := range sizes {
		b := make([]byte, 4096+64)
		h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.OpSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: uint32(k)}}
		p := b[:wire.Build(b, &h, make([]byte, n))]
		f := wire.IPFields{Src: src, Dst: dst, SrcPort: 4791, DstPort: 4791, ID: uint16(k), FlagsFrag: wire.DF}
		wire.PutICRC(p, f.ICRC(p[:len(p)-wire.ICRCLen]))
		pkts = append(pkts, p)
		payload = append(payload, p...)
	}
	ip := make([]byte, 28, 28+len(payload))
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(28+len(payload)))
	binary.BigEndian.PutUint16(ip[6:], wire.DF)
	copy(ip[12:], src.AsSlice())
	copy(ip[16:], dst.AsSlice())
	binary.BigEndian.PutUint16(ip[20:], 4791)
	binary.BigEndian.PutUint16(ip[22:], 4791)
	binary.BigEndian.PutUint16(ip[24:], uint16(8+len(payload)))
	ip = append(ip, payload...)
	return Datagram{Src: src, Dst: dst, SrcPort: 4791, DstPort: 4791, IP: ip, IPHeaderLen: 20, Payload: ip[28:]}, pkts
}

func TestSplitGSO(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int
	}{
		{"single", []int{100}},
		{"equal", []int{1024, 1024, 1024}},
		{"short last", []int{4096, 4096, 4096, 904}},
		{"small", []int{0, 0, 0, 0, 0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, pkts := superPacket(t, tc.sizes)
			segs := SplitGSO(d)
			if len(segs) != len(pkts) {
				t.Fatalf("%d segments, want %d", len(segs), len(pkts))
			}
			for k, s := range segs {
				if string(s.Payload) != string(pkts[k]) {
					t.Errorf("segment %d: payload differs", k)
				}
				if id := binary.BigEndian.Uint16(s.IP[4:]); id != uint16(k) {
					t.Errorf("segment %d: IP ID %d, want %d", k, id, k)
				}
				if c, st, err := wire.ICRCOfIP(s.IP); err != nil || c != st {
					t.Errorf("segment %d: ICRC %08x, stored %08x (%v)", k, c, st, err)
				}
			}
		})
	}
	t.Run("no size explains it", func(t *testing.T) {
		d, _ := superPacket(t, []int{1024, 1024})
		d.Payload[100] ^= 1
		if segs := SplitGSO(d); len(segs) != 1 {
			t.Errorf("a corrupted super-packet split into %d segments, want it returned alone", len(segs))
		}
	})
}
