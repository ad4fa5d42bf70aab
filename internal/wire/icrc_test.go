package wire_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"testing"

	"github.com/goroce/goroce/internal/wire"
)

// ipFields returns the ICRC-covered header fields of a golden datagram as a
// UDP socket would know them, plus the real IPv4 ID and flags.
func ipFields(g *capturedPkt) wire.IPFields {
	f := wire.IPFields{Src: g.d.Src, Dst: g.d.Dst, SrcPort: g.d.SrcPort, DstPort: g.d.DstPort}
	if !g.d.IPv6 {
		f.ID = binary.BigEndian.Uint16(g.d.IP[4:])
		f.FlagsFrag = binary.BigEndian.Uint16(g.d.IP[6:])
	}
	return f
}

func TestICRCGolden(t *testing.T) {
	v4, v6 := 0, 0
	for _, g := range goldenPackets(t) {
		computed, stored, err := wire.ICRCOfIP(g.d.IP)
		if err != nil {
			t.Fatalf("%s: %v", g.name(), err)
		}
		if computed != stored {
			t.Errorf("%s: ICRC from the IP packet %08x, stored %08x", g.name(), computed, stored)
		}
		f := ipFields(&g)
		body := g.d.Payload[:len(g.d.Payload)-wire.ICRCLen]
		if got := f.ICRC(body); got != stored {
			t.Errorf("%s: ICRC from socket fields %08x, stored %08x", g.name(), got, stored)
		}
		// ICRCCopy with the packet whole in head, and cut into head,
		// payload and tail anywhere after the BTH; ICRCGather likewise.
		for _, cut := range [][2]int{{len(body), len(body)}, {wire.BTHLen, wire.BTHLen}, {wire.BTHLen, len(body)},
			{wire.BTHLen + 1, len(body) - 1}, {(wire.BTHLen + len(body)) / 2, len(body) - 2}} {
			i, j := min(cut[0], len(body)), max(min(cut[1], len(body)), min(cut[0], len(body)))
			dst := make([]byte, len(body))
			if got := f.ICRCCopy(dst, body[:i], body[i:j], body[j:]); got != stored || !bytes.Equal(dst, body) {
				t.Errorf("%s: ICRCCopy cut at %d, %d: %08x, stored %08x, or the copy differs", g.name(), i, j, got, stored)
			}
			// ICRCGather with the same cuts: headers and tail in place,
			// the payload copied into the room between them.
			pkt := bytes.Clone(body)
			clear(pkt[i:j])
			if got := f.ICRCGather(pkt, i, body[i:j]); got != stored || !bytes.Equal(pkt, body) {
				t.Errorf("%s: ICRCGather split at %d, payload to %d: %08x, stored %08x, or the packet differs", g.name(), i, j, got, stored)
			}
		}
		if g.d.IPv6 {
			v6++
		} else {
			v4++
		}
	}
	if v4 == 0 || v6 == 0 {
		t.Errorf("golden set has %d IPv4 and %d IPv6 packets; want both", v4, v6)
	}
}

// TestHeaderCache: ICRCs computed with a HeaderCache equal those computed
// without one, over the golden packets (rxe's counting IPv4 IDs, both
// families, many lengths: one cache for all of them, so entries are found
// and replaced) and over random flows, IDs and lengths in runs and
// alternations like a link's.
func TestHeaderCache(t *testing.T) {
	var c wire.HeaderCache
	for _, g := range goldenPackets(t) {
		f := ipFields(&g)
		body := g.d.Payload[:len(g.d.Payload)-wire.ICRCLen]
		want := f.ICRC(body)
		f.Cache = &c
		if got := f.ICRC(body); got != want {
			t.Errorf("%s: ICRC with the cache %08x, without %08x", g.name(), got, want)
		}
		if got, want := f.HeaderCRC(body), (&wire.IPFields{Src: f.Src, Dst: f.Dst, SrcPort: f.SrcPort, DstPort: f.DstPort, ID: f.ID, FlagsFrag: f.FlagsFrag}).HeaderCRC(body); got != want {
			t.Errorf("%s: HeaderCRC with the cache %08x, without %08x", g.name(), got, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	addr := func(v6 bool) netip.Addr {
		if v6 {
			var a [16]byte
			for i := range a {
				a[i] = byte(rng.Uint32())
			}
			return netip.AddrFrom16(a)
		}
		return netip.AddrFrom4([4]byte{127, byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
	}
	pkt := make([]byte, 600)
	for i := range pkt {
		pkt[i] = byte(rng.Uint32())
	}
	for flow := range 200 {
		v6 := flow%3 == 0
		f := wire.IPFields{Src: addr(v6), Dst: addr(v6), SrcPort: uint16(rng.Uint32()), DstPort: wire.UDPPort}
		if !v6 {
			f.FlagsFrag = wire.DF
		}
		lens := []int{wire.BTHLen + rng.IntN(500), wire.BTHLen + rng.IntN(500), wire.BTHLen + rng.IntN(500)}
		for k := range 30 {
			n := lens[0] // a run of one length, then alternations of two, then three
			switch {
			case k >= 20:
				n = lens[k%3]
			case k >= 10:
				n = lens[k%2]
			}
			pkt[4] = byte(rng.Uint32()) // FECN, BECN: masked either way
			if !v6 {
				f.ID = uint16(k)
				if k%5 == 4 {
					f.ID = uint16(rng.Uint32())
				}
			}
			g := f
			g.Cache = nil
			f.Cache = &c
			if got, want := f.ICRC(pkt[:n]), g.ICRC(pkt[:n]); got != want {
				t.Fatalf("flow %d (%v), packet %d of %d bytes, ID %d: ICRC with the cache %08x, without %08x", flow, f.Src, k, n, f.ID, got, want)
			}
			split := min(wire.BTHLen+16, n)
			dst := make([]byte, n)
			if got, want := f.ICRCGather(bytes.Clone(pkt[:n]), split, pkt[split:n]), g.ICRC(pkt[:n]); got != want {
				t.Fatalf("flow %d, packet %d: ICRCGather with the cache %08x, want %08x", flow, k, got, want)
			}
			if got, want := f.ICRCCopy(dst, pkt[:split], pkt[split:n], nil), g.ICRC(pkt[:n]); got != want {
				t.Fatalf("flow %d, packet %d: ICRCCopy with the cache %08x, want %08x", flow, k, got, want)
			}
		}
	}
}

// TestRecoverIPv4IDGolden recovers rxe's changing IP ID of every IPv4
// golden packet from its ICRC alone, as a UDP-socket receiver must.
func TestRecoverIPv4IDGolden(t *testing.T) {
	ids := map[uint16]bool{}
	for _, g := range goldenPackets(t) {
		if g.d.IPv6 {
			continue
		}
		f := ipFields(&g)
		want := f.ID
		f.ID = 0xdead // ignored
		got, ok := wire.RecoverIPv4ID(&f, g.d.Payload)
		if !ok || got != want {
			t.Errorf("%s: recovered ID %d (ok=%v), want %d", g.name(), got, ok, want)
		}
		ids[want] = true
	}
	if len(ids) < 100 {
		t.Errorf("only %d distinct IP IDs in the golden set; the test needs rxe's changing IDs", len(ids))
	}
}

// TestRecoverIPv4IDRejects: a corrupted packet must not find an ID that
// excuses it, except with probability 2^-16 per packet.
func TestRecoverIPv4IDRejects(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	accepted, tried := 0, 0
	for _, g := range goldenPackets(t) {
		if g.d.IPv6 {
			continue
		}
		f := ipFields(&g)
		pkt := bytes.Clone(g.d.Payload)
		i := rng.IntN(len(pkt))
		pkt[i] ^= 1 << rng.IntN(8)
		if i == 4 { // BTH byte 4 is masked: the flip does not count
			continue
		}
		tried++
		if _, ok := wire.RecoverIPv4ID(&f, pkt); ok {
			accepted++
		}
	}
	if accepted > 0 {
		t.Errorf("%d of %d corrupted packets found an IP ID that made their ICRC correct", accepted, tried)
	}
}

func TestRecoverIPv4IDRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		n := 16 + 4*rng.IntN(1100)
		pkt := make([]byte, n)
		for i := range pkt {
			pkt[i] = byte(rng.Uint32())
		}
		f := wire.IPFields{
			Src: netip.AddrFrom4([4]byte{127, 0, 0, byte(rng.Uint32())}), Dst: netip.AddrFrom4([4]byte{127, 0, 0, 2}),
			SrcPort: uint16(rng.Uint32()), DstPort: wire.UDPPort, ID: uint16(rng.Uint32()), FlagsFrag: wire.DF,
		}
		wire.PutICRC(pkt, f.ICRC(pkt[:n-wire.ICRCLen]))
		want := f.ID
		got, ok := wire.RecoverIPv4ID(&f, pkt)
		if !ok || got != want {
			t.Fatalf("len %d: recovered %d (ok=%v), want %d", n, got, ok, want)
		}
	}
}

// icrcMasked reports whether byte i of a RoCEv2 IP packet (with an IP
// header of ipLen bytes) is left out of the ICRC, wholly or in part.
func icrcMasked(i, ipLen int, v6 bool) bool {
	switch {
	case v6 && i < 4: // version is covered, class and flow label are not
		return i != 0
	case v6 && i == 7: // hop limit
		return true
	case !v6 && (i == 1 || i == 8 || i == 10 || i == 11): // TOS, TTL, checksum
		return true
	case i == ipLen+6 || i == ipLen+7: // UDP checksum
		return true
	case i == ipLen+wire.UDPLen+4: // BTH FECN, BECN, resv6a
		return true
	}
	return false
}

// TestICRCDetectsEveryBitFlip flips, one at a time, every bit the ICRC
// covers in the headers and the tail of every golden packet, and a seeded
// sample of payload bits, and expects the ICRC to fail each time. Bits of
// masked fields are flipped too and must not change the ICRC.
func TestICRCDetectsEveryBitFlip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	flips := 0
	for _, g := range goldenPackets(t) {
		ip := bytes.Clone(g.d.IP)
		ipLen := g.d.IPHeaderLen
		positions := []int{}
		for i := range min(len(ip), ipLen+wire.UDPLen+wire.BTHLen+wire.AtomicETHLen) {
			positions = append(positions, i)
		}
		for i := max(len(ip)-8, 0); i < len(ip); i++ {
			positions = append(positions, i)
		}
		for range 16 {
			positions = append(positions, rng.IntN(len(ip)))
		}
		for _, i := range positions {
			for bit := range 8 {
				if g.d.IPv6 && i == 0 && bit < 4 { // traffic class high nibble
					continue
				}
				ip[i] ^= 1 << bit
				computed, stored, err := wire.ICRCOfIP(ip)
				detected := err != nil || computed != stored
				if masked := icrcMasked(i, ipLen, g.d.IPv6); masked && detected {
					t.Errorf("%s: flipping masked byte %d bit %d changed the ICRC", g.name(), i, bit)
				} else if !masked && !detected {
					t.Errorf("%s: flipping byte %d bit %d went unnoticed", g.name(), i, bit)
				}
				ip[i] ^= 1 << bit
				flips++
			}
		}
	}
	t.Logf("%d single-bit flips checked", flips)
}

func TestICRCAllocs(t *testing.T) {
	g := goldenPackets(t)[0]
	f := ipFields(&g)
	body := g.d.Payload[:len(g.d.Payload)-wire.ICRCLen]
	if n := testing.AllocsPerRun(100, func() { wire.ICRCOfIP(g.d.IP) }); n != 0 {
		t.Errorf("ICRCOfIP: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { f.ICRC(body) }); n != 0 {
		t.Errorf("IPFields.ICRC: %v allocations", n)
	}
	dst := make([]byte, len(body))
	if n := testing.AllocsPerRun(100, func() { f.ICRCCopy(dst, body[:20], body[20:len(body)-1], body[len(body)-1:]) }); n != 0 {
		t.Errorf("IPFields.ICRCCopy: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { f.ICRCGather(dst, 20, body[20:len(body)-1]) }); n != 0 {
		t.Errorf("IPFields.ICRCGather: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { wire.RecoverIPv4ID(&f, g.d.Payload) }); n != 0 {
		t.Errorf("RecoverIPv4ID: %v allocations", n)
	}
	f.Cache = new(wire.HeaderCache)
	if n := testing.AllocsPerRun(100, func() { f.ICRC(body) }); n != 0 {
		t.Errorf("IPFields.ICRC with a HeaderCache: %v allocations", n)
	}
}

// BenchmarkICRC: the ICRC of a WRITE with a payload of each size (BTH,
// RETH, payload), as a receiver checks it (ICRC) and as a sender builds it
// with the payload gathered from the MR (ICRCGather); cached/ with a
// HeaderCache, as the UDP link computes them.
func BenchmarkICRC(b *testing.B) {
	f := wire.IPFields{Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.2"), SrcPort: 0xc000, DstPort: wire.UDPPort, FlagsFrag: wire.DF}
	fc := f
	fc.Cache = new(wire.HeaderCache)
	for _, size := range []int{64, 256, 464, 1024, 4096} {
		split := wire.BTHLen + wire.RETHLen
		pkt := make([]byte, split+size)
		payload := make([]byte, size)
		for _, v := range []struct {
			name string
			f    *wire.IPFields
		}{{"", &f}, {"cached/", &fc}} {
			b.Run(v.name+byteSize(size), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(pkt)))
				for b.Loop() {
					v.f.ICRC(pkt)
				}
			})
			b.Run(v.name+"gather/"+byteSize(size), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(pkt)))
				for b.Loop() {
					v.f.ICRCGather(pkt, split, payload)
				}
			})
		}
	}
}

func BenchmarkRecoverIPv4ID(b *testing.B) {
	pkt := make([]byte, wire.BTHLen+1024+wire.ICRCLen)
	f := wire.IPFields{Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.2"), SrcPort: 0xc000, DstPort: wire.UDPPort, ID: 4711, FlagsFrag: wire.DF}
	wire.PutICRC(pkt, f.ICRC(pkt[:len(pkt)-wire.ICRCLen]))
	b.ReportAllocs()
	for b.Loop() {
		wire.RecoverIPv4ID(&f, pkt)
	}
}

func byteSize(n int) string {
	if n >= 1024 {
		return strconv.Itoa(n/1024) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// TestDeferredICRC: a packet whose ICRC check was deferred (DeferICRC with
// HeaderCRC) passes CopyPayload and CheckICRC with its own bytes, payload
// copied; with any byte the ICRC covers changed, both report it wrong,
// once checked it stays checked, and a packet with no check pending copies
// as copy does.
func TestDeferredICRC(t *testing.T) {
	for _, g := range goldenPackets(t) {
		f := ipFields(&g)
		raw := bytes.Clone(g.d.Payload)
		body := raw[:len(raw)-wire.ICRCLen]
		var p wire.Packet
		if err := p.Parse(raw); err != nil {
			t.Fatalf("%s: %v", g.name(), err)
		}
		if p.ICRCPending() || !p.CheckICRC() {
			t.Fatalf("%s: a parsed packet has a check pending or failed", g.name())
		}
		p.DeferICRC(f.HeaderCRC(body))
		dst := make([]byte, len(p.Payload)+3)
		if !p.CopyPayload(dst) || !bytes.Equal(dst[:len(p.Payload)], p.Payload) || p.ICRCPending() || !p.CheckICRC() {
			t.Errorf("%s: CopyPayload of an intact packet: wrong result or copy", g.name())
		}
		p.Parse(raw)
		p.DeferICRC(f.HeaderCRC(body))
		if !p.CheckICRC() || !wire.CheckDeferredICRC(raw, f.HeaderCRC(body)) {
			t.Errorf("%s: CheckICRC of an intact packet failed", g.name())
		}

		// Damage in the headers (byte 8 of the BTH, its destination QP) and
		// in the last byte the ICRC covers.
		for _, at := range []int{8, len(body) - 1} {
			bad := bytes.Clone(raw)
			bad[at] ^= 0x20
			seed := f.HeaderCRC(bad[:len(body)])
			for _, copying := range []bool{true, false} {
				var q wire.Packet
				if err := q.Parse(bad); err != nil {
					t.Fatalf("%s: %v", g.name(), err)
				}
				q.DeferICRC(seed)
				ok := q.CheckICRC()
				if copying {
					ok = q.CopyPayload(dst)
				}
				if ok || q.ICRCPending() || q.CheckICRC() || q.CopyPayload(dst) {
					t.Errorf("%s: byte %d damaged, copying %v: the ICRC passed or did not stay failed", g.name(), at, copying)
				}
			}
		}
	}
}
