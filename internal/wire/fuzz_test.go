package wire_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/wire"
)

// normalize clears what the encoders write as zero by definition: reserved
// bits (BTH resv6a and resv7, DETH byte 4, FETH bits 31:6), pad bytes, the
// CNP reserved block, and the ICRC.
func normalize(p *wire.Packet, b []byte) []byte {
	n := bytes.Clone(b)
	n[4] &^= 0x3f
	n[8] &^= 0x7f
	if off := p.Info.Offset(wire.HdrDETH); off != 0 {
		n[off+4] = 0
	}
	if off := p.Info.Offset(wire.HdrFETH); off != 0 {
		n[off], n[off+1], n[off+2] = 0, 0, 0
		n[off+3] &= 0x3f
	}
	if off := p.Info.Offset(wire.HdrCNPReserved); off != 0 {
		clear(n[off : off+wire.CNPReservedLen])
	}
	end := len(n) - wire.ICRCLen
	clear(n[end-len(p.Pad):])
	return n
}

// FuzzParse: no input panics Parse, and every packet it accepts re-encodes
// from its fields to the same bytes (up to reserved bits and pad).
func FuzzParse(f *testing.F) {
	for _, g := range goldenPackets(f) {
		f.Add(g.d.Payload)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p wire.Packet
		if err := p.Parse(b); err != nil {
			return
		}
		if got := p.Info.HdrLen + len(p.Payload) + len(p.Pad) + wire.ICRCLen; got != len(b) {
			t.Fatalf("parts add up to %d bytes, packet has %d", got, len(b))
		}
		h := p.Headers()
		out := make([]byte, len(b))
		if n := wire.Build(out, &h, p.Payload); n != len(b) {
			t.Fatalf("Build wrote %d bytes, want %d", n, len(b))
		}
		want := normalize(&p, b)
		clear(want[len(want)-wire.ICRCLen:])
		if !bytes.Equal(out, want) {
			t.Fatalf("re-encoded\n %x\nwant\n %x", out, want)
		}
	})
}

// FuzzICRCOfIP: arbitrary IP packets never panic the ICRC code, and for
// well-formed IPv4 ones the socket-fields form agrees with it.
func FuzzICRCOfIP(f *testing.F) {
	for _, g := range goldenPackets(f) {
		f.Add(g.d.IP)
	}
	f.Fuzz(func(t *testing.T, ip []byte) {
		computed, _, err := wire.ICRCOfIP(ip)
		if err != nil || ip[0] != 0x45 || len(ip) < 20+8+16 {
			return
		}
		fields := wire.IPFields{
			Src: netip.AddrFrom4([4]byte(ip[12:16])), Dst: netip.AddrFrom4([4]byte(ip[16:20])),
			SrcPort: uint16(ip[20])<<8 | uint16(ip[21]), DstPort: uint16(ip[22])<<8 | uint16(ip[23]),
			ID: uint16(ip[4])<<8 | uint16(ip[5]), FlagsFrag: uint16(ip[6])<<8 | uint16(ip[7]),
		}
		// The fields form derives the lengths from the packet; make the
		// header's lengths agree before comparing.
		tot := uint16(len(ip))
		if uint16(ip[2])<<8|uint16(ip[3]) != tot || uint16(ip[24])<<8|uint16(ip[25]) != tot-20 {
			return
		}
		body := ip[28 : len(ip)-wire.ICRCLen]
		if got := fields.ICRC(body); got != computed {
			t.Fatalf("fields form %08x, IP form %08x", got, computed)
		}
		dst := make([]byte, len(body))
		if got := fields.ICRCCopy(dst, body, nil, nil); got != computed || !bytes.Equal(dst, body) {
			t.Fatalf("copying form %08x, IP form %08x, or the copy differs", got, computed)
		}
	})
}

// FuzzRecoverIPv4ID: whatever the packet and ID, the ID is recovered from
// a correct ICRC.
func FuzzRecoverIPv4ID(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), uint16(0), uint16(0xc000))
	f.Add(bytes.Repeat([]byte{0xff}, 1040), uint16(0xffff), uint16(1))
	f.Fuzz(func(t *testing.T, pkt []byte, id, sport uint16) {
		if len(pkt) < wire.BTHLen+wire.ICRCLen {
			return
		}
		fields := wire.IPFields{
			Src: netip.AddrFrom4([4]byte{198, 18, 0, 2}), Dst: netip.AddrFrom4([4]byte{198, 18, 0, 3}),
			SrcPort: sport, DstPort: wire.UDPPort, ID: id, FlagsFrag: wire.DF,
		}
		wire.PutICRC(pkt, fields.ICRC(pkt[:len(pkt)-wire.ICRCLen]))
		if got, ok := wire.RecoverIPv4ID(&fields, pkt); !ok || got != id {
			t.Fatalf("recovered %d (ok=%v), want %d", got, ok, id)
		}
	})
}

// FuzzHeaderCache: an ICRC computed with a HeaderCache equals one computed
// without, whatever the packet, family, ports, ID and flags, and whatever
// the cache saw before (each input runs through a cache shared by the
// whole fuzzing process, then through a fresh one).
func FuzzHeaderCache(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123"), false, uint16(0xc000), uint16(0), uint16(wire.DF), uint8(1))
	f.Add(bytes.Repeat([]byte{0xa5}, 1040), true, uint16(49152), uint16(7), uint16(0), uint8(200))
	shared := new(wire.HeaderCache)
	f.Fuzz(func(t *testing.T, pkt []byte, v6 bool, sport, id, flags uint16, host uint8) {
		if len(pkt) < wire.BTHLen {
			return
		}
		fields := wire.IPFields{
			Src: netip.AddrFrom4([4]byte{198, 18, 0, host}), Dst: netip.AddrFrom4([4]byte{198, 18, 1, 2}),
			SrcPort: sport, DstPort: wire.UDPPort, ID: id, FlagsFrag: flags,
		}
		if v6 {
			fields.Src = netip.AddrFrom16([16]byte{0: 0xfd, 15: host})
			fields.Dst = netip.AddrFrom16([16]byte{0: 0xfd, 15: 2})
			fields.ID, fields.FlagsFrag = 0, 0
		}
		want := fields.ICRC(pkt)
		for _, c := range []*wire.HeaderCache{shared, new(wire.HeaderCache)} {
			g := fields
			g.Cache = c
			if got := g.ICRC(pkt); got != want {
				t.Fatalf("ICRC with a cache %08x, without %08x", got, want)
			}
		}
	})
}
