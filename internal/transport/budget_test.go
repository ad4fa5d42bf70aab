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
	const m = minGrant
	var woken []*QP
	b := NewBudget(4*m, func(qp *QP) { woken = append(woken, qp) })
	q := make([]*QP, 5)
	for i := range q {
		q[i] = &QP{}
	}
	const q0, q1 = 2*m + m/4, 4*m - (2*m + m/4) - 6 // what q0 and q1 take: 6 are left
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
		{"q0 takes what it wants", func() int { return b.take(q[0], 1, q0) }, q0, 4*m - q0, 0, nil, 0, false},
		{"q1 takes what it wants, more than minGrant", func() int { return b.take(q[1], 1, q1) }, q1, 6, 0, nil, 0, false},
		{"q2 waits", func() int { return b.take(q[2], 1, m) }, 0, 6, 1, nil, 0, true},
		{"q2 asks again: still waits, queued once", func() int { return b.take(q[2], 1, m) }, 0, 6, 1, nil, 0, true},
		{"q3 waits behind q2", func() int { return b.take(q[3], 1, m) }, 0, 6, 2, nil, 0, true},
		{"m/2 back: too few for q2's minGrant", func() int { b.give(m / 2); return 0 }, 0, m/2 + 6, 2, nil, 0, true},
		{"m/2 more: q2 gets minGrant set aside, q3 still waits", func() int { b.give(m / 2); return 0 }, 0, 6, 1, []*QP{q[2]}, m, false},
		{"q4 may not overtake q3", func() int { return b.take(q[4], 1, 2) }, 0, 6, 2, []*QP{q[2]}, m, false},
		{"q2's take hands over what was set aside", func() int { return b.take(q[2], 1, m) }, m, 6, 2, []*QP{q[2]}, 0, false},
		{"q3 leaves: q4 is served at once", func() int { b.leave(q[3]); return 0 }, 0, 4, 0, []*QP{q[2], q[4]}, 0, false},
		{"q4 leaves with its PSNs set aside: they come back", func() int { b.leave(q[4]); return 0 }, 0, 6, 0, []*QP{q[2], q[4]}, 0, false},
		{"everything back", func() int { b.give(q0 + q1 + m - (m/2 + m/2)); return 0 }, 0, 4 * m, 0, []*QP{q[2], q[4]}, 0, false},
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

// TestBudgetOneQP: a QP with a 512-PSN window and a budget of maxTake
// PSNs sends maxTake packets, the last asking for an ACK, and then only
// as ACKs give PSNs back; the message completes with nothing sent twice,
// and the budget is whole at the end.
func TestBudgetOneQP(t *testing.T) {
	h := newHarness(t, 256, nil)
	b := NewBudget(maxTake, func(*QP) {})
	h.a.qp.cfg.Window, h.a.qp.cfg.Budget = 512, b
	h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, 1000*256)},
		RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
	h.a.qp.Progress(h)
	first := h.a.env.take()
	if len(first) != maxTake {
		t.Fatalf("%d packets sent without an ACK, want %d", len(first), maxTake)
	}
	var last wire.Packet
	must(t, last.Parse(first[maxTake-1].Buf))
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
	if b.Available() != maxTake || h.a.qp.req.held != 0 {
		t.Errorf("at the end: budget %d, the QP holds %d; want %d and 0", b.Available(), h.a.qp.req.held, maxTake)
	}
}

// TestBudgetShared: two QPs sharing a budget never have more PSNs in
// flight together than it holds; resends after losses take none; both
// WRITEs complete and the budget is whole at the end.
func TestBudgetShared(t *testing.T) {
	const size = maxTake // the smallest budget
	b := NewBudget(size, func(*QP) {})
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
			h.a.qp.Progress(h)
			h.b.qp.Progress(h)
			if in := hs[0].a.qp.req.inFlight(hs[0].a.qp) + hs[1].a.qp.req.inFlight(hs[1].a.qp); in > size {
				t.Fatalf("round %d: %d PSNs in flight, budget %d", round, in, size)
			}
			held := 0
			for _, x := range hs {
				held += x.a.qp.req.held + x.a.qp.budget.aside
			}
			if held+b.Available() != size {
				t.Fatalf("round %d: QPs hold or have set aside %d, budget has %d: PSNs lost or made", round, held, b.Available())
			}
			pa, pb := h.a.env.take(), h.b.env.take()
			moved = moved || len(pa)+len(pb) > 0
			h.move(pa, h.b, true)
			h.move(pb, h.a, false)
		}
		if !moved {
			for _, h := range hs { // a lost tail: the retry timer resends it
				if h.a.qp.Deadline() != 0 {
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
	if b.Available() != size {
		t.Errorf("at the end the budget has %d, want %d", b.Available(), size)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestBudgetWants: from a message's start a requester asks its budget for
// that message and the SENDs and WRITEs queued behind it, up to
// grantAhead PSNs, stopping at a READ, an atomic or a fenced WR, and
// never beyond its window or maxTake.
func TestBudgetWants(t *testing.T) {
	write := func(h *harness, n int, flags SendFlags) SendWR {
		return SendWR{Opcode: WRRDMAWrite, Flags: flags, SGL: []memory.SGE{h.a.sge(0, n)}, RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()}
	}
	read := func(h *harness, n int) SendWR {
		return SendWR{Opcode: WRRDMARead, SGL: []memory.SGE{h.a.sge(0, n)}, RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()}
	}
	for _, tc := range []struct {
		name   string
		window int
		wrs    func(h *harness) []SendWR
		want   int
	}{
		{"one 16-packet WRITE", 512, func(h *harness) []SendWR { return []SendWR{write(h, 16*256, 0)} }, 16},
		{"twenty 16-packet WRITEs: grantAhead's worth", 512, func(h *harness) []SendWR {
			return slices.Repeat([]SendWR{write(h, 16*256, SendSignaled)}, 20)
		}, grantAhead},
		{"40 one-packet WRITEs", 512, func(h *harness) []SendWR { return slices.Repeat([]SendWR{write(h, 64, 0)}, 40) }, 40},
		{"60 one-packet WRITEs: all of them", 512, func(h *harness) []SendWR {
			return slices.Repeat([]SendWR{write(h, 64, 0)}, 60)
		}, 60},
		{"a 20-packet WRITE and 280 more packets: capped at grantAhead", 512, func(h *harness) []SendWR {
			return []SendWR{write(h, 20*256, 0), write(h, 130*256, 0), write(h, 150*256, 0)}
		}, grantAhead},
		{"a READ stops it", 512, func(h *harness) []SendWR {
			return []SendWR{write(h, 16*256, 0), read(h, 256), write(h, 16*256, 0)}
		}, 16},
		{"a fenced WRITE stops it", 512, func(h *harness) []SendWR {
			return []SendWR{write(h, 16*256, 0), write(h, 16*256, SendFence), write(h, 16*256, 0)}
		}, 16},
		{"a 400-packet WRITE: maxTake", 512, func(h *harness) []SendWR { return []SendWR{write(h, 400*256, 0)} }, maxTake},
		{"a window of 32", 32, func(h *harness) []SendWR { return slices.Repeat([]SendWR{write(h, 16*256, 0)}, 8) }, 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 256, nil)
			qp := h.a.qp
			qp.cfg.Window = tc.window
			h.post(h.a, tc.wrs(h)...)
			r := &qp.req
			w := qp.cfg.SQ.slot(r.wqe)
			if got := r.wants(qp, r.psnsLeft(qp, w), 1); got != tc.want {
				t.Errorf("wants %d PSNs, want %d", got, tc.want)
			}
		})
	}
}

// TestBudgetGrantsAhead: a QP that waits for its budget behind another
// gets nothing while PSNs come back one message (16) at a time, then a
// grant of minGrant once they add up, and sends that many PSNs' whole
// messages in its next turn, the last packet asking for the ACK that gives
// them back.
func TestBudgetGrantsAhead(t *testing.T) {
	const msgs = minGrant / 16 // 16-packet messages in a grant
	var woken []*QP
	b := NewBudget(minGrant, func(qp *QP) { woken = append(woken, qp) })
	ha, hb := newHarness(t, 256, nil), newHarness(t, 256, nil)
	for _, h := range []*harness{ha, hb} {
		h.a.qp.cfg.Window, h.a.qp.cfg.Budget = 512, b
		for i := range msgs {
			h.post(h.a, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(i*4096, 4096)},
				RemoteAddr: h.b.mr.Addr() + uint64(i*4096), RKey: h.b.mr.RKey()})
		}
	}
	ha.a.qp.Progress(ha)
	sent := ha.a.env.take()
	if len(sent) != minGrant || b.Available() != 0 {
		t.Fatalf("the first QP sent %d packets, the budget has %d left; want %d and 0", len(sent), b.Available(), minGrant)
	}
	hb.a.qp.Progress(hb)
	if n := len(hb.a.env.take()); n != 0 || !hb.a.qp.budget.waiting || hb.a.qp.budget.want != minGrant {
		t.Fatalf("the second QP sent %d packets, waits %v for %d PSNs; want 0, true, %d", n, hb.a.qp.budget.waiting, hb.a.qp.budget.want, minGrant)
	}
	for m := range msgs { // the first QP's messages are acknowledged one by one
		ha.move(sent[16*m:16*m+16], ha.b, true)
		ha.b.qp.Progress(ha)
		ha.move(ha.b.env.take(), ha.a, false)
		if m < msgs-1 && (len(woken) != 0 || b.Available() != 16*(m+1)) {
			t.Fatalf("after %d ACKs: budget %d, woken %d; want %d and none", m+1, b.Available(), len(woken), 16*(m+1))
		}
	}
	if len(woken) != 1 || woken[0] != hb.a.qp || hb.a.qp.budget.aside != minGrant {
		t.Fatalf("after %d PSNs came back: woken %v, set aside %d; want the second QP, %d", minGrant, woken, hb.a.qp.budget.aside, minGrant)
	}
	hb.a.qp.Progress(hb)
	turn := hb.a.env.take()
	if len(turn) != minGrant {
		t.Fatalf("the second QP's turn sent %d packets, want %d (%d messages)", len(turn), minGrant, msgs)
	}
	for i, p := range turn {
		var pkt wire.Packet
		must(t, pkt.Parse(p.Buf))
		// Each signaled message's last packet asks (rxe's rule), the
		// turn's last one above all; no other does.
		if want := i%16 == 15; pkt.BTH.AckReq() != want {
			t.Errorf("packet %d AckReq %v, want %v", i, pkt.BTH.AckReq(), want)
		}
	}
}
