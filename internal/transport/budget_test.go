package transport

import (
	"slices"
	"testing"

	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/wire"
)

// TestBudgetGrants: a budget grants from need to want PSNs or nothing,
// never fewer than minGrant to a QP that wants more; the QPs it cannot
// serve wait in order, each once, and get PSNs set aside (and a wake-up)
// as PSNs come back.
func TestBudgetGrants(t *testing.T) {
	var woken []*QP
	b := NewBudget(128, func(qp *QP) { woken = append(woken, qp) })
	q := make([]*QP, 5)
	for i := range q {
		q[i] = &QP{}
	}
	steps := []struct {
		name       string
		do         func() int
		want       int
		avail      int
		waiting    int
		wantWoken  []*QP
		wantAside  int // of q[2]
		wantQ2Wait bool
	}{
		{"q0 takes what it wants", func() int { return b.take(q[0], 1, 100) }, 100, 28, 0, nil, 0, false},
		{"q1 takes the rest, more than minGrant", func() int { return b.take(q[1], 1, 100) }, 28, 0, 0, nil, 0, false},
		{"q2 waits", func() int { return b.take(q[2], 1, 16) }, 0, 0, 1, nil, 0, true},
		{"q2 asks again: still waits, queued once", func() int { return b.take(q[2], 1, 16) }, 0, 0, 1, nil, 0, true},
		{"q3 waits behind q2", func() int { return b.take(q[3], 1, 16) }, 0, 0, 2, nil, 0, true},
		{"10 back: too few for q2's minGrant", func() int { b.give(10); return 0 }, 0, 10, 2, nil, 0, true},
		{"10 more: q2 gets 16 set aside, q3 still waits", func() int { b.give(10); return 0 }, 0, 4, 1, []*QP{q[2]}, 16, false},
		{"q4 may not overtake q3", func() int { return b.take(q[4], 1, 2) }, 0, 4, 2, []*QP{q[2]}, 16, false},
		{"q2's take hands over what was set aside", func() int { return b.take(q[2], 1, 16) }, 16, 4, 2, []*QP{q[2]}, 0, false},
		{"q3 leaves: q4 is served at once", func() int { b.leave(q[3]); return 0 }, 0, 2, 0, []*QP{q[2], q[4]}, 0, false},
		{"q4 leaves with its PSNs set aside: they come back", func() int { b.leave(q[4]); return 0 }, 0, 4, 0, []*QP{q[2], q[4]}, 0, false},
		{"everything back", func() int { b.give(80 + 28 + 16); return 0 }, 0, 128, 0, []*QP{q[2], q[4]}, 0, false},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want {
			t.Fatalf("%s: granted %d, want %d", s.name, got, s.want)
		}
		if b.Available() != s.avail || len(b.waiting) != s.waiting || !slices.Equal(woken, s.wantWoken) ||
			q[2].budget.aside != s.wantAside || q[2].budget.waiting != s.wantQ2Wait {
			t.Fatalf("%s: available %d waiting %d woken %v q2 %+v; want %d, %d, %v, aside %d waiting %v",
				s.name, b.Available(), len(b.waiting), woken, q[2].budget, s.avail, s.waiting, s.wantWoken, s.wantAside, s.wantQ2Wait)
		}
	}
}

// TestBudgetOneQP: a QP with a 512-PSN window and a 128-PSN budget sends
// 128 packets, the last asking for an ACK, and then only as ACKs give
// PSNs back; the message completes with nothing sent twice, and the
// budget is whole at the end.
func TestBudgetOneQP(t *testing.T) {
	h := newHarness(t, 256, nil)
	b := NewBudget(128, func(*QP) {})
	h.a.qp.cfg.Window, h.a.qp.cfg.Budget = 512, b
	h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, 1000*256)},
		RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
	h.a.qp.Progress(h.now)
	first := h.a.env.take()
	if len(first) != 128 {
		t.Fatalf("%d packets sent without an ACK, want 128", len(first))
	}
	var last wire.Packet
	must(t, last.Parse(first[127].Buf))
	if !last.BTH.AckReq() {
		t.Error("the packet that uses the budget's last PSN does not ask for an ACK")
	}
	h.move(first, h.b, true)
	h.deliver()
	if len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCSuccess {
		t.Fatalf("WCs %+v", h.a.cq.wcs)
	}
	if len(h.sent) != 1000 {
		t.Errorf("%d packets sent, want 1000 (none twice)", len(h.sent))
	}
	if b.Available() != 128 || h.a.qp.req.held != 0 {
		t.Errorf("at the end: budget %d, the QP holds %d; want 128 and 0", b.Available(), h.a.qp.req.held)
	}
}

// TestBudgetShared: two QPs sharing a budget never have more PSNs in
// flight together than it holds; resends after losses take none; both
// WRITEs complete and the budget is whole at the end.
func TestBudgetShared(t *testing.T) {
	b := NewBudget(128, func(*QP) {})
	hs := []*harness{newHarness(t, 256, nil), newHarness(t, 256, nil)}
	for i, h := range hs {
		h.a.qp.cfg.Window, h.a.qp.cfg.Budget = 512, b
		n := 0
		h.drop = func(toB bool, p *wire.Packet) bool { // every 97th request is lost, once
			n++
			return toB && n%97 == 0
		}
		h.post(h.a, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, 600*256)},
			RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
	}
	for round := 0; len(hs[0].a.cq.wcs)+len(hs[1].a.cq.wcs) < 2; round++ {
		if round == 10000 {
			t.Fatal("the WRITEs did not complete")
		}
		moved := false
		for _, h := range hs {
			h.a.qp.Progress(h.now)
			h.b.qp.Progress(h.now)
			if in := hs[0].a.qp.req.inFlight(hs[0].a.qp) + hs[1].a.qp.req.inFlight(hs[1].a.qp); in > 128 {
				t.Fatalf("round %d: %d PSNs in flight, budget 128", round, in)
			}
			held := 0
			for _, x := range hs {
				held += x.a.qp.req.held + x.a.qp.budget.aside
			}
			if held+b.Available() != 128 {
				t.Fatalf("round %d: QPs hold or have set aside %d, budget has %d: PSNs lost or made", round, held, b.Available())
			}
			pa, pb := h.a.env.take(), h.b.env.take()
			moved = moved || len(pa)+len(pb) > 0
			h.move(pa, h.b, true)
			h.move(pb, h.a, false)
		}
		if !moved {
			for _, h := range hs { // a lost tail: the retry timer resends it
				if !h.a.qp.Deadline().IsZero() {
					h.advance()
				}
			}
		}
	}
	for _, h := range hs {
		if wc := h.a.cq.wcs[0]; wc.Status != WCSuccess {
			t.Errorf("WRITE %d: %v", wc.WRID, wc.Status)
		}
		if !slices.Equal(h.a.buf[:600*256], h.b.buf[:600*256]) {
			t.Error("the WRITE did not land whole")
		}
		if len(h.sent) <= 600 {
			t.Errorf("%d packets sent: nothing was resent, the test lost nothing", len(h.sent))
		}
	}
	if b.Available() != 128 {
		t.Errorf("at the end the budget has %d, want 128", b.Available())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
