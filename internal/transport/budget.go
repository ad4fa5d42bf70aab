package transport

import "slices"

// Budget shares the PSNs a device's RC requesters may have in flight at
// once. Each QP's window bounds what one QP sends ahead of its ACKs; the
// budget bounds what all of them send together, so that many busy QPs do
// not overflow the peer's receive buffer (a socket buffer or a same-host
// ring) with more than it can hold, which costs every QP whose last
// packets are dropped a whole ACK timeout. A QP takes PSNs before it
// sends packets with new PSNs, keeps them while those packets are
// unacknowledged, and gives them back as ACKs (or READ responses and
// atomic replies) arrive. Resent packets need none: their PSNs are still
// held. Like the window (rxe's MAX_UNACKED_PSNS), the budget is the
// requester's own flow control and invisible on the wire: IBA sets no
// limit on the PSNs a requester has outstanding, and a responder accepts
// any within half the PSN space.
//
// A budget is not safe for concurrent use: the QPs that share it must
// run on one goroutine (a device worker's), which calls their methods.
type Budget struct {
	avail   int       // PSNs no QP holds or has set aside
	size    int       // the budget's PSNs in all
	waiting []*QP     // QPs waiting for PSNs, first come first served
	wake    func(*QP) // runs a QP again (its Progress) once PSNs are set aside for it
}

// budgetWait is a QP's place in its budget's queue.
type budgetWait struct {
	waiting    bool
	need, want int // what the QP asked for
	aside      int // PSNs set aside for it, handed over at its next take
}

// minGrant is the fewest PSNs a budget grants a QP that asks for more:
// two of rxe's send windows (MaxUnackedPSNs), sixteen 64 KiB messages at
// MTU 4096. Handing out PSNs a few at a time, as ACKs return them, would
// cut messages into short bursts that each ask for an ACK, and a QP among
// hundreds would send one message per turn, every turn on per-QP state
// that the other QPs' payloads have pushed out of the cache. The larger
// the grant, the more bytes each such turn moves; the price is paid in a
// long queue: a QP waits for the grants of the QPs ahead of it, and with
// a budget of 1024 four QPs send at a time.
// Chosen by measurement: docs/design/tuning.md#min-grant.
const minGrant = 2 * MaxUnackedPSNs

// grantAhead is how far past the message it starts a requester asks its
// budget for: the PSNs of the SENDs and WRITEs queued behind it, up to
// this many with the message's own, so that the QP sends them in the
// same turn: a QP that asked for its message's PSNs alone would be granted
// no more than those, however large minGrant.
// Chosen by measurement: docs/design/tuning.md#grant-ahead.
const grantAhead = minGrant

// NewBudget returns a budget of n PSNs (at least maxTake). wake must make
// the device run the QP it is given (Progress) soon, on the QP's
// goroutine; the budget calls it from inside the methods of its QPs.
func NewBudget(n int, wake func(*QP)) *Budget {
	n = max(n, maxTake)
	return &Budget{avail: n, size: n, wake: wake}
}

// Available returns the PSNs of the budget that no QP holds.
func (b *Budget) Available() int { return b.avail }

// Size returns the budget's PSNs in all.
func (b *Budget) Size() int { return b.size }

// grantable returns how many PSNs of a request for need to want the
// budget can grant now: 0, or from need to want.
func (b *Budget) grantable(need, want int) int {
	if b.avail < max(need, min(want, minGrant)) {
		return 0
	}
	return min(want, b.avail)
}

// take grants qp either nothing or from need to want PSNs
// (1 ≤ need ≤ want ≤ the budget's size). On nothing qp waits, behind
// the QPs already waiting: the budget sets PSNs aside for it and runs it
// again when they come back, and its next take returns them.
func (b *Budget) take(qp *QP, need, want int) int {
	bw := &qp.budget
	if bw.aside > 0 {
		g := bw.aside
		bw.aside = 0
		return g
	}
	if bw.waiting {
		return 0
	}
	if len(b.waiting) == 0 {
		if g := b.grantable(need, want); g > 0 {
			b.avail -= g
			return g
		}
	}
	bw.waiting, bw.need, bw.want = true, need, want
	b.waiting = append(b.waiting, qp)
	return 0
}

// give returns n PSNs and sets them aside for the QPs waiting, in order.
func (b *Budget) give(n int) {
	b.avail += n
	served := 0
	for _, qp := range b.waiting {
		bw := &qp.budget
		g := b.grantable(bw.need, bw.want)
		if g == 0 {
			break
		}
		b.avail -= g
		bw.waiting, bw.aside = false, g
		served++
		b.wake(qp)
	}
	if served > 0 {
		b.waiting = b.waiting[:copy(b.waiting, b.waiting[served:])]
	}
}

// leave takes qp out of the queue and returns what was set aside for it.
func (b *Budget) leave(qp *QP) {
	bw := &qp.budget
	if bw.waiting {
		b.waiting = slices.DeleteFunc(b.waiting, func(q *QP) bool { return q == qp })
		bw.waiting = false
	}
	n := bw.aside
	bw.aside = 0
	b.give(n) // also serves those that waited behind qp
}

// maxTake is the most PSNs a requester asks its budget for at once, a
// grant's worth: a budget must be able to grant it. A READ of more
// response packets than this goes once it holds maxTake; its responses
// overdraw what the QP holds until they arrive.
const maxTake = minGrant

// inFlight returns the PSNs sent and not yet acknowledged.
func (r *requester) inFlight(qp *QP) int { return max(r.maxPSN.Diff(qp.comp.psn), 0) }

// spare returns the PSNs the requester holds beyond those in flight.
func (r *requester) spare(qp *QP) int { return r.held - r.inFlight(qp) }

// psnsLeft returns how many PSNs the rest of w takes from the requester's
// position: one per packet of a SEND or WRITE, one per response packet of
// a READ, one for an atomic.
func (r *requester) psnsLeft(qp *QP, w *sendWQE) int {
	switch w.wr.Opcode {
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		return 1
	}
	return packets(w.length-r.offset, qp.path.MTU)
}

// credit reports whether the requester holds the PSNs the next packet of
// w needs, taking them from the budget if it can. On false the QP waits
// for the budget to run it again.
func (r *requester) credit(qp *QP, w *sendWQE, take bool) bool {
	b := qp.cfg.Budget
	if b == nil || !qp.reliable() {
		return true
	}
	left := r.psnsLeft(qp, w)
	next := 1 // PSNs the next packet takes: a READ request takes all its responses'
	if w.wr.Opcode == WRRDMARead {
		next = left
	}
	fresh := r.psn.Add(next).Diff(r.maxPSN) // PSNs never sent before
	if fresh <= 0 {
		return true // a resend: its PSNs are held
	}
	need := min(fresh, maxTake)
	want := 0
	for {
		spare := max(r.spare(qp), 0)
		if spare >= need {
			if qp.budget.waiting || qp.budget.aside > 0 {
				b.leave(qp) // what it holds sufficed after all
			}
			return true
		}
		if !take {
			return false
		}
		if want == 0 {
			want = r.wants(qp, left, need)
		}
		// PSNs set aside while the QP waited may fall short of a need
		// that grew meanwhile: then the loop asks again.
		g := b.take(qp, need-spare, want-spare)
		if g == 0 {
			return false
		}
		r.held += g
	}
}

// exhausts reports whether the packet about to be sent uses the last
// PSN the requester holds while the budget could not grant it more now:
// it then asks for an ACK, or the QP might wait for the retry timer to
// get its PSNs back (IBA 9.2.2: AckReq may be set on any packet). While
// the budget has PSNs to spare, the requester's next take succeeds, and
// a burst of one-packet messages (each of which takes its own PSN) does
// not ask for an ACK on every one of them.
func (r *requester) exhausts(qp *QP) bool {
	b := qp.cfg.Budget
	return b != nil && r.psn == r.maxPSN && r.spare(qp) <= 1 && !b.canGrant()
}

// canGrant reports whether a take of up to minGrant PSNs would succeed now.
func (b *Budget) canGrant() bool { return len(b.waiting) == 0 && b.avail >= minGrant }

// giveBack returns the PSNs the requester holds beyond those in flight.
// A QP in the middle of a long message takes them again for its next
// packets, behind the QPs that wait: the budget's QPs take turns by the
// ACK.
func (qp *QP) giveBack() {
	if b := qp.cfg.Budget; b != nil {
		if n := qp.req.spare(qp); n > 0 {
			qp.req.held -= n
			b.give(n)
		}
	}
}

// giveBackAll returns every PSN the requester holds: the QP stops sending
// (the error state, RESET, destruction).
func (qp *QP) giveBackAll() {
	b := qp.cfg.Budget
	if b == nil {
		return
	}
	if n := qp.req.held; n > 0 {
		qp.req.held = 0
		b.give(n)
	}
	b.leave(qp)
}

// wants returns how many PSNs a requester that needs need more for the
// next packet of the WQE it sends (left PSNs from its position) asks its
// budget for: the rest of that message and, from a message's start, the
// SENDs and WRITEs queued behind it, up to grantAhead, as far as the
// window lets them go.
func (r *requester) wants(qp *QP, left, need int) int {
	rest := r.psn.Add(left).Diff(r.maxPSN)
	if r.offset == 0 && rest < grantAhead {
		_, tail := qp.cfg.SQ.bounds()
		for i := r.wqe + 1; i != tail && rest < grantAhead; i++ {
			w := qp.cfg.SQ.slot(i)
			if !streams(w) || w.wr.Flags&SendFence != 0 {
				break
			}
			rest += packets(w.length, qp.path.MTU)
		}
		rest = min(rest, max(grantAhead, need))
	}
	return min(max(rest, need), maxTake, max(qp.window()-r.inFlight(qp), need))
}
