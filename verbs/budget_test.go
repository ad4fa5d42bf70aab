package verbs

import (
	"slices"
	"testing"
)

// budgets returns, for each of d's workers, the PSNs of its send budget
// that no QP holds, read on the worker.
func budgets(d *Device) []int {
	free, _ := d.eng.Budgets()
	return free
}

// full reports whether every worker's budget is whole again.
func full(d *Device) bool {
	free, size := d.eng.Budgets()
	return slices.Equal(free, size)
}

// TestSendBudgetManyQPs: 128 QPs that each write 256 KiB at once share
// their device's send budget, so the peer's socket buffer or same-host
// ring never overflows: nothing is dropped or resent, every WRITE lands,
// and the budget is whole again at the end. (With the QPs' windows
// alone, 512 PSNs each, the same run overflows the peer's socket buffer
// at once.)
func TestSendBudgetManyQPs(t *testing.T) {
	for _, l := range links[1:] { // the in-memory link has no buffer to overflow
		t.Run(l.name, func(t *testing.T) {
			const qps, msgs, size = 128, 4, 64 << 10
			da, db := l.open(t)
			a, b := newEndpoint(t, da, qps*msgs*size), newEndpoint(t, db, qps*msgs*size)
			fill(a.buf, 7)
			type conn struct{ a, b *endpoint }
			conns := []conn{{a, b}}
			for range qps - 1 {
				x, y := *a, *b
				var err error
				for _, e := range []*endpoint{&x, &y} {
					e.qp, err = e.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
						Cap: QPCap{MaxSendWR: msgs, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
					must(t, err)
				}
				conns = append(conns, conn{&x, &y})
			}
			for _, c := range conns {
				// A 4 s ACK timeout: a slow run (-race on a busy
				// machine) resends nothing that was not lost.
				connectPair(t, c.a, c.b, MTU4096, 7, 20)
			}
			for i, c := range conns {
				var wrs []SendWR
				for m := range msgs {
					off := uint64((i*msgs + m) * size)
					wrs = append(wrs, SendWR{WRID: off, Opcode: WRRDMAWrite, Flags: SendSignaled,
						SGL: []SGE{a.mr.SGE(int(off), size)}, RemoteAddr: b.mr.Addr() + off, RKey: b.mr.RKey()})
				}
				_, err := c.a.qp.PostSend(wrs)
				must(t, err)
			}
			for _, wc := range wait(t, a.cq, qps*msgs) {
				if wc.Status != WCSuccess {
					t.Fatalf("WRITE %#x: %v", wc.WRID, wc.Status)
				}
			}
			settle(db)
			if string(a.buf) != string(b.buf) {
				t.Error("the WRITEs did not land whole")
			}
			sa, sb := da.Counters(), db.Counters()
			for _, c := range []struct {
				name string
				n    uint64
			}{
				{"sender's completer_retry_err", sa["completer_retry_err"]},
				{"receiver's socket_drops", sb["socket_drops"]},
				{"receiver's samehost_drops", sb["samehost_drops"]},
				{"receiver's out_of_seq_request", sb["out_of_seq_request"]},
			} {
				if c.n != 0 {
					t.Errorf("%s = %d, want 0", c.name, c.n)
				}
			}
			settle(da)
			if !full(da) {
				t.Errorf("budgets after every WRITE completed: %v, want whole", budgets(da))
			}
		})
	}
}

// TestSendBudgetDestroy: a QP destroyed with packets in flight, or in
// the error state, gives its PSNs back to the budget.
func TestSendBudgetDestroy(t *testing.T) {
	for _, end := range []string{"destroy", "error"} {
		t.Run(end, func(t *testing.T) {
			a, b := pair(t, 1<<20, MTU1024)
			b.qp.Modify(&QPAttr{State: QPSErr}, AttrState) // nobody answers: a's packets stay in flight
			_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 1<<16)},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
			must(t, err)
			settle(a.dev)
			if full(a.dev) {
				t.Fatalf("a WRITE unanswered: budgets %v, want 64 PSNs held", budgets(a.dev))
			}
			if end == "destroy" {
				must(t, a.qp.Destroy())
			} else {
				must(t, a.qp.Modify(&QPAttr{State: QPSErr}, AttrState))
				settle(a.dev)
			}
			if !full(a.dev) {
				t.Errorf("after %s: budgets %v, want whole", end, budgets(a.dev))
			}
		})
	}
}
