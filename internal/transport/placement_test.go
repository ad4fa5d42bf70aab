package transport

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// TestPlacementCold follows the reuse distance through a sequence of WRITE
// messages of several QPs.
func TestPlacementCold(t *testing.T) {
	type msg struct {
		qp   int
		n    uint64
		cold bool
		cont bool // continues the QP's previous message
	}
	for _, tc := range []struct {
		name     string
		distance uint64
		msgs     []msg
	}{
		{"one QP rewrites its buffer", 1000, []msg{{0, 400, false, false}, {0, 400, false, false}, {0, 999, false, false}, {0, 400, false, false}}},
		{"a message as long as the distance", 1000, []msg{{0, 1000, true, false}, {0, 10, false, false}, {1, 5000, true, false}}},
		{"QPs in turn", 1000, []msg{
			{0, 300, false, false}, {1, 300, false, false}, {2, 300, false, false},
			{0, 300, false, false}, // 600 placed by others since, plus its own 300
			{1, 300, false, false},
			{2, 300, false, false},
		}},
		{"more QPs in turn", 1000, []msg{
			{0, 300, false, false}, {1, 300, false, false}, {2, 300, false, false}, {3, 300, false, false},
			{0, 300, true, false}, // 900 + 300
			{1, 300, true, false},
			{1, 300, false, false}, // its own again at once
			{0, 300, false, false}, // 300 since its last
		}},
		{"a run of messages", 1000, []msg{
			{0, 400, false, false}, {0, 400, false, true}, {0, 400, true, true}, // 1200 in one run
			{0, 400, false, false}, // a new run: its own 400
			{1, 300, false, false},
			{0, 300, false, false}, {0, 400, true, true}, // 300 by QP 1 since, then 700 of its own
			{2, 100, false, false},
			{0, 300, true, true}, // the run goes on: QP 2's 100 in it does not count
		}},
		{"distance 0", 0, []msg{{0, 1 << 40, false, false}, {1, 1, false, false}, {0, 1, false, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Placement{Distance: tc.distance}
			qps := make([]reuse, 4)
			for i, m := range tc.msgs {
				if got := p.cold(&qps[m.qp], m.n, m.cont); got != m.cold {
					t.Fatalf("message %d (QP %d, %d bytes): cold %v, want %v", i, m.qp, m.n, got, m.cold)
				}
			}
		})
	}
	var none *Placement
	var u reuse
	if none.cold(&u, 1<<40, false) {
		t.Error("a nil Placement judged a message cold")
	}
	if p := NewPlacement(30 << 20); p.Distance != 10<<20 {
		t.Errorf("NewPlacement(30 MiB).Distance = %d, want a third", p.Distance)
	}
}

// TestPlacementWrite: WRITE messages judged cold are placed with
// non-temporal stores, byte for byte as the others, in every packet of a
// message (MTU 1024, odd lengths and offsets, a lost packet resent), and
// counted in cold_writes; the others are not counted.
func TestPlacementWrite(t *testing.T) {
	h := newHarness(t, 1024, nil)
	st := stats.New()
	h.b.qp.cfg.Stats = st
	h.b.qp.cfg.Placement = &Placement{Distance: 8 << 10}
	for i := range h.a.buf {
		h.a.buf[i] = byte(i*7 + 1)
	}
	lost := h.loseFirst(true, wire.OpWriteMiddle)
	type write struct {
		src, dst, n int
	}
	writes := []write{
		{0, 0x10000, 10*1024 + 17},    // cold: longer than the distance
		{0x8000, 0x20003, 3*1024 + 5}, // not: 3 KiB since this QP's last
		{0x3001, 0x30001, 9 * 1024},   // cold
		{0x100, 0x40000, 100},         // not
	}
	for i, w := range writes {
		h.post(h.a, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(w.src, w.n)},
			RemoteAddr: h.b.mr.Addr() + uint64(w.dst), RKey: h.b.mr.RKey()})
	}
	h.deliver()
	for range 20 {
		if len(h.a.cq.wcs) == len(writes) {
			break
		}
		h.advance()
		h.deliver()
	}
	if len(h.a.cq.wcs) != len(writes) || !*lost {
		t.Fatalf("WCs %+v (lost a packet: %v), want %d", h.a.cq.wcs, *lost, len(writes))
	}
	for i, w := range writes {
		if !bytes.Equal(h.b.buf[w.dst:w.dst+w.n], h.a.buf[w.src:w.src+w.n]) {
			t.Errorf("write %d: target differs from source", i)
		}
		if h.b.buf[w.dst-1] != 0 || h.b.buf[w.dst+w.n] != 0 {
			t.Errorf("write %d: a byte beside the target changed", i)
		}
	}
	if got := st.Get(stats.ColdWrites); got != 2 {
		t.Errorf("cold_writes %d, want 2", got)
	}
}

// TestPlacementRNR: a cold WRITE with immediate that meets no receive WQE
// is sent back with an RNR NAK before anything is placed; placed when the
// requester sends it again, it counts once.
func TestPlacementRNR(t *testing.T) {
	h := newHarness(t, 1024, nil)
	st := stats.New()
	h.b.qp.cfg.Stats = st
	h.b.qp.cfg.Placement = &Placement{Distance: 512}
	for i := range h.a.buf {
		h.a.buf[i] = byte(i*3 + 5)
	}
	h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, Imm: 7,
		SGL: []memory.SGE{h.a.sge(0x100, 1000)}, RemoteAddr: h.b.mr.Addr() + 0x2000, RKey: h.b.mr.RKey()})
	h.deliver()
	if len(h.back) != 1 || h.back[0].AETH.Type() != wire.AckTypeRNRNAK {
		t.Fatalf("responder sent %d packets, want one RNR NAK", len(h.back))
	}
	if got := st.Get(stats.ColdWrites); got != 0 {
		t.Fatalf("cold_writes %d before anything was placed", got)
	}
	h.postRecv(h.b, RecvWR{WRID: 9})
	h.advance()
	h.deliver()
	if len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCSuccess || len(h.b.cq.wcs) != 1 {
		t.Fatalf("after the RNR wait: WCs %+v / %+v", h.a.cq.wcs, h.b.cq.wcs)
	}
	if !bytes.Equal(h.b.buf[0x2000:0x2000+1000], h.a.buf[0x100:0x100+1000]) {
		t.Error("target differs from source")
	}
	if got := st.Get(stats.ColdWrites); got != 1 {
		t.Errorf("cold_writes %d, want 1", got)
	}
}

// TestPlacementSource follows the requesters' reuse distance of their
// sources: a clock of its own, which the WRITEs a device places do not
// move.
func TestPlacementSource(t *testing.T) {
	p := &Placement{Distance: 1000}
	qps := make([]reuse, 3)
	for i, m := range []struct {
		qp   int
		n    uint64
		cold bool
	}{
		{0, 400, false}, {0, 400, false}, // one QP sends its buffer again and again
		{1, 1000, true}, // as long as the distance
		{2, 300, false},
		{0, 300, true}, // 1300 gathered by the others since, plus its own
		{1, 100, false},
		{2, 200, false}, // 400 since, plus 200
	} {
		if m.qp == 1 && m.n == 100 {
			var w reuse // a WRITE placed in between moves the other clock only
			p.cold(&w, 1<<30, false)
		}
		if got := p.coldSource(&qps[m.qp], m.n); got != m.cold {
			t.Fatalf("message %d (QP %d, %d bytes): cold %v, want %v", i, m.qp, m.n, got, m.cold)
		}
	}
	var none *Placement
	var u reuse
	if none.coldSource(&u, 1<<40) || (&Placement{}).coldSource(&u, 1<<40) {
		t.Error("no Placement, or distance 0, judged a source cold")
	}
}

// TestPlacementSourceSend: a requester whose link gathers counts each
// message of more than one packet it starts from a source likely out of
// cache in cold_sources, SENDs and WRITEs alike, a message whose first
// packet spans two SGEs too, and the data arrive the same (the prefetch
// it asks for is a hint). A message of one packet is not judged, however
// long its distance. Over a link that copies each payload into its
// packet as the packet is built, nothing is judged: the copy reads the
// source at once.
func TestPlacementSourceSend(t *testing.T) {
	for _, gather := range []bool{true, false} {
		t.Run(fmt.Sprintf("gather=%v", gather), func(t *testing.T) {
			h := newHarness(t, 1024, nil)
			h.a.env.gather, h.b.env.gather = gather, gather
			st := stats.New()
			h.a.qp.cfg.Stats = st
			h.a.qp.cfg.Placement = &Placement{Distance: 512}
			for i := range h.a.buf {
				h.a.buf[i] = byte(i*5 + 3)
			}
			type msg struct {
				op   WROpcode
				sgl  []memory.SGE
				dst  int
				cold bool
			}
			msgs := []msg{
				{WRRDMAWrite, []memory.SGE{h.a.sge(0, 10*1024+17)}, 0x10000, true},
				{WRRDMAWrite, []memory.SGE{h.a.sge(0x8000, 1000)}, 0x20003, false}, // one packet
				{WRSend, []memory.SGE{h.a.sge(0x3001, 500), h.a.sge(0x9000, 9*1024)}, 0x30001, true},
				{WRRDMAWrite, []memory.SGE{h.a.sge(0x100, 100)}, 0x40000, false},
			}
			want := 0
			for i, m := range msgs {
				if m.op == WRSend {
					h.postRecv(h.b, RecvWR{WRID: uint64(i), SGL: []memory.SGE{h.b.sge(m.dst, 16*1024)}})
				}
				h.post(h.a, SendWR{WRID: uint64(i), Opcode: m.op, Flags: SendSignaled, SGL: m.sgl,
					RemoteAddr: h.b.mr.Addr() + uint64(m.dst), RKey: h.b.mr.RKey()})
				h.deliver()
				if m.cold && gather {
					want++
				}
				if got := int(st.Get(stats.ColdSources)); got != want {
					t.Fatalf("message %d: cold_sources %d, want %d", i, got, want)
				}
			}
			if len(h.a.cq.wcs) != len(msgs) {
				t.Fatalf("WCs %+v, want %d", h.a.cq.wcs, len(msgs))
			}
			for i, m := range msgs {
				var src []byte
				for _, s := range m.sgl {
					off := int(s.Addr - h.a.mr.Addr())
					src = append(src, h.a.buf[off:off+int(s.Length)]...)
				}
				if !bytes.Equal(h.b.buf[m.dst:m.dst+len(src)], src) {
					t.Errorf("message %d: target differs from source", i)
				}
			}
			if gather && h.gathered == 0 {
				t.Error("no packet went out with a gathered payload")
			}
		})
	}
}
