package transport

import (
	"encoding/binary"
	"time"

	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// completer matches responses to send WQEs and completes them in order
// (IBA 9.7.5.1, 10.8):
//
//	ACK for PSN p            every SEND/WRITE ending at or before p is done (ACKs coalesce)
//	READ RESPONSE            data placed; LAST/ONLY completes the READ, and implies
//	                         an ACK of everything before it
//	ATOMIC ACKNOWLEDGE       the original value placed; the atomic is done
//	NAK PSN sequence error   implicit ACK before p, then resend from p
//	NAK other                the WQE at p fails; the QP moves to ERR
//	RNR NAK                  implicit ACK before p, wait the timer, resend from p
//	timeout                  resend from the oldest unacknowledged PSN
type completer struct {
	psn        psn.PSN       // oldest PSN not yet acknowledged
	wqe        uint64        // oldest WQE not yet completed
	retries    int           // go-backs without progress since the last progress
	rnrRetries int           // RNR NAKs survived since the last progress
	retrying   bool          // a go-back is under way: no response has moved psn since it began
	deadline   monotime.Time // retransmit timer, on the Clock; zero when nothing is outstanding
	early      monotime.Time // the next early go-back, on the Clock; zero for none
	earlyN     int           // early go-backs since the timer was armed
	rnrPSN     psn.PSN       // PSN of the last RNR NAK, while rnrActive
	rnrActive  bool
}

// ackTimeout is the local ACK timeout of IBA 9.7.6.1.3: 4.096 µs × 2^t.
func ackTimeout(t uint8) time.Duration {
	if t == 0 {
		return 0
	}
	return time.Duration(4096<<min(t, 31)) * time.Nanosecond
}

// earlyDelay is how long the requester waits without a response before
// its n-th early go-back (n from 0) since the retransmit timer was armed;
// 0 for none. The first waits a sixteenth of the ACK timeout, at least
// minEarly, and each one after twice as long as the one before, while
// that stays under half the ACK timeout: four at the default timeout 14
// (67 ms), after 4, 8, 17 and 34 ms.
//
// An early go-back recovers the losses that leave a requester with
// nothing to hear: the last packets of a message, the NAK for a lost
// packet, the resend of a lost packet, an ACK. Each of them otherwise
// costs a whole ACK timeout, hundreds of round trips on a LAN, since IBA
// has the responder NAK a gap only once and answer only the packets that
// ask. It resends from the oldest unacknowledged PSN with the congestion
// window at minCwnd, so the answer to a silence that was only a busy
// peer is two packets; it is not a retry (the retry count and the
// retransmit timer go on as armed, so a dead peer is found as late as
// before) and not on the wire any different from a retransmission
// after a timeout.
//
// Chosen by measurement: docs/design/tuning.md#early-go-back.
func earlyDelay(t uint8, n int) time.Duration {
	full := ackTimeout(t)
	d := max(full/16, minEarly) << n
	if d >= full/2 {
		return 0
	}
	return d
}

// minEarly is the shortest wait before an early go-back: longer than the
// round trip of any path a software RNIC's peer is on, and than the
// scheduling delays of a busy host, mostly.
const minEarly = 500 * time.Microsecond

// armTimer starts the retransmit timer, and the early go-backs', if it is
// not running.
func (c *completer) armTimer(qp *QP, now Clock) {
	if c.deadline.IsZero() && qp.path.Timeout != 0 {
		t := now.Now()
		c.deadline = t.Add(ackTimeout(qp.path.Timeout))
		c.early, c.earlyN = 0, 0
		if d := earlyDelay(qp.path.Timeout, 0); d > 0 {
			c.early = t.Add(d)
		}
	}
}

// stopTimers stops the retransmit timer and the early go-backs'.
func (c *completer) stopTimers() {
	c.deadline, c.early = 0, 0
}

// progressed restarts the timer and the retry count after a response
// moved psn on from from, and lets the congestion window grow. A
// response that acknowledges PSNs beyond those the requester resent
// since a go-back shows the first transmission arrived: if a silence
// started the go-back, it was a delay, not a loss.
func (c *completer) progressed(qp *QP, now Clock, from psn.PSN) {
	spurious := c.retrying && c.psn.After(qp.req.psn)
	c.retries, c.rnrRetries, c.retrying = 0, 0, false
	if qp.req.cc.acked(c.psn.Diff(from), c.psn, qp.sendWindow(), spurious) {
		qp.cfg.Stats.Inc(stats.SpuriousGoBacks)
	}
	if c.rnrActive && c.psn.After(c.rnrPSN) {
		c.rnrActive = false
	}
	c.stopTimers()
	if qp.req.psn != c.psn {
		c.armTimer(qp, now)
	}
}

// Deadline returns when Timeout must next be called, on the Clock the QP
// is given; the zero Time for never.
func (qp *QP) Deadline() monotime.Time {
	d := qp.comp.deadline
	for _, t := range [...]monotime.Time{qp.comp.early, qp.req.rnrUntil} {
		if !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	return d
}

// Timeout handles an expired retransmit, early go-back or RNR timer.
func (qp *QP) Timeout(now Clock) {
	c := &qp.comp
	if !qp.req.rnrUntil.IsZero() && !now.Now().Before(qp.req.rnrUntil) {
		qp.request(now)
	}
	if c.deadline.IsZero() {
		return
	}
	if t := now.Now(); t.Before(c.deadline) {
		if !c.early.IsZero() && !t.Before(c.early) {
			c.earlyN++
			c.early = 0
			if d := earlyDelay(qp.path.Timeout, c.earlyN); d > 0 {
				c.early = t.Add(d)
			}
			if qp.req.psn != c.psn {
				qp.cfg.Stats.Inc(stats.EarlyGoBacks)
				qp.goBack(now, true)
			}
		}
		return
	}
	c.stopTimers()
	if qp.req.psn == c.psn {
		return // nothing outstanding
	}
	// IBA 9.7.6.1.3: retry_cnt retries, then RETRY_EXC_ERR. A timeout
	// is a whole ACK timeout without progress (progressed rearms the
	// timer), so every one counts.
	if c.retries >= int(qp.path.RetryCnt) {
		qp.failOutstanding(WCRetryExcErr)
		return
	}
	c.retries++
	qp.cfg.Stats.Inc(stats.CompleterRetryErr)
	qp.goBack(now, true)
}

// goBack resends from the oldest PSN still needed, after a silence (an
// ACK timeout or an early go-back) or a sequence NAK; a silence cuts the
// congestion window.
func (qp *QP) goBack(now Clock, silence bool) {
	c := &qp.comp
	if silence {
		qp.req.cc.silent(qp.req.maxPSN, qp.req.maxPSN.Diff(c.psn), qp.sendWindow())
	}
	c.retrying = true
	qp.rewind(c.psn)
	qp.request(now)
}

// handleResponse processes an ACK, NAK, read response or atomic ACK.
func (qp *QP) handleResponse(p *wire.Packet, now Clock) {
	pn := psn.PSN(p.BTH.PSN())
	switch p.BTH.Opcode().Op() {
	case wire.OpAcknowledge:
		switch p.AETH.Type() {
		case wire.AckTypeACK:
			qp.ackThrough(pn, now)
		case wire.AckTypeRNRNAK:
			qp.rnrNAK(pn, p.AETH.Value(), now)
		case wire.AckTypeNAK:
			qp.nak(pn, wire.NAKCode(p.AETH.Value()), now)
		}
	case wire.OpReadResponseFirst, wire.OpReadResponseMiddle, wire.OpReadResponseLast, wire.OpReadResponseOnly:
		qp.readResponse(p, pn, now)
	case wire.OpAtomicAcknowledge:
		qp.atomicAck(p, pn, now)
	}
	qp.complete()
	qp.giveBack()
}

// ackThrough marks every SEND and RDMA WRITE whose packets all lie at or
// before p as acknowledged (IBA 9.7.5.1.1: an ACK acknowledges all earlier
// PSNs), stopping at a READ or atomic still waiting for its response.
func (qp *QP) ackThrough(p psn.PSN, now Clock) {
	c := &qp.comp
	if p.Before(c.psn.Add(-1)) || p.Diff(qp.req.maxPSN) >= 0 {
		return // old (duplicate), or for a PSN never sent
	}
	next := p.Next() // the PSN acknowledged up to
	_, tail := qp.cfg.SQ.bounds()
	for i := c.wqe; i != tail; i++ {
		w := qp.cfg.SQ.slot(i)
		if !w.started {
			break
		}
		if w.acked {
			continue
		}
		if w.isReadOrAtomic() {
			// The ACK cannot complete a READ or an atomic, and if it covers
			// one, its response was lost (IBA 9.7.5.1.2): acknowledge only
			// up to the response still expected, so the retransmit timer
			// stays armed and the request goes again.
			if exp := w.expectedPSN(qp.path.MTU); exp.Before(next) {
				next = exp
			}
			break
		}
		// A WQE keeps its PSNs when it is sent again after a rewind, so an
		// ACK covering its last PSN completes it even mid-resend.
		if w.lastPSN().After(p) {
			break
		}
		w.acked = true
	}
	if next.After(c.psn) {
		from := c.psn
		c.psn = next
		c.progressed(qp, now, from)
		qp.skipAcked()
	}
}

// skipAcked moves the requester past what the peer has acknowledged
// meanwhile: after a rewind, ACKs and READ and atomic responses for the
// first transmission can overtake the resend (all the sooner when the
// congestion window holds the resend back), and the requester must not
// send the next message at PSNs they already used.
func (qp *QP) skipAcked() {
	r, c := &qp.req, &qp.comp
	if !r.psn.Before(c.psn) {
		return
	}
	qp.rewind(c.psn)
	if r.psn.Before(c.psn) { // no started WQE holds c.psn: start the next one there
		_, tail := qp.cfg.SQ.bounds()
		for r.wqe != tail && qp.cfg.SQ.slot(r.wqe).acked {
			r.wqe++
		}
		r.psn, r.offset = c.psn, 0
	}
}

// nextUnacked returns the oldest started WQE not yet acknowledged, after
// marking SENDs and WRITEs ending before p as acknowledged: a response for
// PSN p implies an ACK of everything before it (IBA 9.7.5.1.2).
func (qp *QP) nextUnacked(p psn.PSN) (*sendWQE, bool) {
	_, tail := qp.cfg.SQ.bounds()
	for i := qp.comp.wqe; i != tail; i++ {
		w := qp.cfg.SQ.slot(i)
		if !w.started {
			return nil, false
		}
		if w.acked {
			continue
		}
		if !w.isReadOrAtomic() && w.lastPSN().Before(p) {
			w.acked = true
			continue
		}
		return w, true
	}
	return nil, false
}

// readResponse places RDMA READ response data (IBA 9.7.5.1.2).
func (qp *QP) readResponse(p *wire.Packet, pn psn.PSN, now Clock) {
	c := &qp.comp
	w, ok := qp.nextUnacked(pn)
	if !ok || w.wr.Opcode != WRRDMARead {
		return
	}
	d := pn.Diff(w.firstPSN)
	off := uint64(d) * uint64(qp.path.MTU)
	if d < 0 || off != w.placed {
		return // not the response expected next: a duplicate, or one after a lost packet
	}
	n := uint64(len(p.Payload))
	last := p.Info.Position.IsLast()
	if off+n > w.length || !last && n != uint64(qp.path.MTU) || last && off+n != w.length {
		qp.failWQE(w, WCBadRespErr) // IBA 9.7.5.1.2: a response of the wrong length
		return
	}
	if n > 0 {
		if _, err := qp.cfg.Mem.Scatter(qp.cfg.PD, w.sgl, off, p.Payload); err != nil {
			qp.failWQE(w, WCLocProtErr)
			return
		}
	}
	w.placed += n
	from := c.psn
	c.psn = pn.Next()
	if last {
		w.acked = true
		c.psn = w.lastPSN().Next()
	}
	c.progressed(qp, now, from)
	qp.skipAcked()
}

// atomicAck places the original value an atomic returned (IBA 9.7.5.1.3),
// in host byte order as rxe does.
func (qp *QP) atomicAck(p *wire.Packet, pn psn.PSN, now Clock) {
	w, ok := qp.nextUnacked(pn)
	if !ok || w.firstPSN != pn || (w.wr.Opcode != WRAtomicCmpAndSwp && w.wr.Opcode != WRAtomicFetchAndAdd) || w.acked {
		return
	}
	var orig [8]byte
	binary.NativeEndian.PutUint64(orig[:], p.AtomicAckETH.OrigData())
	if _, err := qp.cfg.Mem.Scatter(qp.cfg.PD, w.sgl, 0, orig[:]); err != nil {
		qp.failWQE(w, WCLocProtErr)
		return
	}
	w.acked = true
	from := qp.comp.psn
	qp.comp.psn = pn.Next()
	qp.comp.progressed(qp, now, from)
	qp.skipAcked()
}

// nak handles a NAK for PSN p (IBA 9.7.5.1.4).
func (qp *QP) nak(p psn.PSN, code wire.NAKCode, now Clock) {
	c := &qp.comp
	before := c.psn
	qp.ackThrough(p.Add(-1), now)
	w, ok := qp.nextUnacked(p)
	if !ok {
		return
	}
	switch code {
	case wire.NAKPSNSeqError:
		qp.cfg.Stats.Inc(stats.RcvdSeqErr)
		if c.rnrActive && p == c.rnrPSN {
			// The responder dropped what followed the packet it RNR-NAKed
			// and says so with a sequence NAK for the same PSN: nothing was
			// lost, and the RNR retry already resends it.
			return
		}
		progress := c.psn != before
		if c.retrying && !progress {
			// A go-back is under way and nothing has been answered since
			// it began: this NAK was sent for a packet that went before
			// the resend (or is a copy of one already handled), and going
			// back again would resend what the resend is carrying. If the
			// resend is lost too, the timer goes back (rxe: a NAK during
			// a retry starts no other).
			return
		}
		// IBA 9.7.6.1.3 counts a retry for each sequence NAK; goroce
		// counts those that bring no progress. A NAK whose implied ACK
		// moved psn on proves the responder alive and taking packets, so
		// a long message through a lossy path, which meets a loss every
		// few round trips, never runs out of retries while it advances.
		if !progress {
			if c.retries >= int(qp.path.RetryCnt) {
				qp.failWQE(w, WCRetryExcErr)
				return
			}
			c.retries++
		}
		// Resend from the earliest PSN still needed: p, or an earlier READ
		// or atomic whose response was lost.
		qp.cfg.Stats.Inc(stats.CompleterRetryErr)
		qp.goBack(now, false)
		return
	case wire.NAKInvalidReq:
		qp.failWQE(w, WCRemInvReqErr)
	case wire.NAKRemoteAccess:
		qp.failWQE(w, WCRemAccessErr)
	case wire.NAKInvalidRDReq:
		qp.failWQE(w, WCRemInvRDReqErr)
	default:
		qp.failWQE(w, WCRemOpErr)
	}
}

// rnrNAK handles a receiver-not-ready NAK (IBA 9.7.5.2.8): wait the time
// the responder asked for, then resend from p; rnr_retry 7 retries forever.
func (qp *QP) rnrNAK(p psn.PSN, timer uint8, now Clock) {
	qp.cfg.Stats.Inc(stats.RcvdRNRErr)
	qp.comp.rnrPSN, qp.comp.rnrActive = p, true
	qp.ackThrough(p.Add(-1), now)
	w, ok := qp.nextUnacked(p)
	if !ok {
		return
	}
	if qp.path.RNRRetry != 7 {
		if qp.comp.rnrRetries >= int(qp.path.RNRRetry) {
			qp.failWQE(w, WCRNRRetryExcErr)
			return
		}
		qp.comp.rnrRetries++
	}
	qp.rewind(qp.comp.psn) // p, or an earlier READ/atomic still unanswered
	qp.req.rnrUntil = now.Now().Add(wire.RNRTimeout(timer))
	qp.comp.stopTimers()
}

// rewind makes the requester resend from PSN p (go-back-N): the WQE that
// holds p restarts there, a partly answered READ asks for the rest.
func (qp *QP) rewind(p psn.PSN) {
	r, c := &qp.req, &qp.comp
	_, tail := qp.cfg.SQ.bounds()
	r.rdAtomicOut = 0
	for i := c.wqe; i != tail; i++ {
		w := qp.cfg.SQ.slot(i)
		if !w.started {
			break
		}
		if w.acked {
			continue
		}
		d := p.Diff(w.firstPSN)
		if d < 0 || d >= w.npkts {
			if w.isReadOrAtomic() {
				r.rdAtomicOut++
			}
			continue
		}
		// w holds p: resend from there.
		r.wqe, r.psn = i, p
		r.offset = uint64(d) * uint64(qp.path.MTU) // an atomic has one PSN: 0
		if w.wr.Opcode == WRRDMARead {
			r.offset = w.placed // the request asks for the rest
		}
		for j := i; j != tail; j++ {
			x := qp.cfg.SQ.slot(j)
			if !x.acked {
				x.sent = false
			}
		}
		if p.Before(c.psn) {
			c.psn = p
		}
		return
	}
	// No WQE holds p: resend from the first unfinished one.
	for i := c.wqe; i != tail; i++ {
		w := qp.cfg.SQ.slot(i)
		if w.acked {
			continue
		}
		if w.started {
			qp.rewind(w.expectedPSN(qp.path.MTU))
		}
		return
	}
}

// normalize keeps comp.psn consistent with the send queue: everything
// before the oldest unfinished WQE is acknowledged, so comp.psn is never
// behind that WQE's next expected PSN; with nothing outstanding it equals
// the requester's PSN and the timer stops.
func (c *completer) normalize(qp *QP, tail uint64) {
	if c.wqe == tail || !qp.cfg.SQ.slot(c.wqe).started {
		if c.wqe == qp.req.wqe && c.psn != qp.req.psn {
			c.psn = qp.req.psn
			c.stopTimers()
		}
		return
	}
	if exp := qp.cfg.SQ.slot(c.wqe).expectedPSN(qp.path.MTU); c.psn.Before(exp) {
		c.psn = exp
	}
}

// failWQE completes w with an error status and moves the QP to ERR;
// everything after it is flushed (IBA 10.8.3.1).
func (qp *QP) failWQE(w *sendWQE, status WCStatus) {
	switch status {
	case WCRetryExcErr:
		qp.cfg.Stats.Inc(stats.RetryExceededErr)
	case WCRNRRetryExcErr:
		qp.cfg.Stats.Inc(stats.RetryRNRExceededErr)
	}
	w.failed = status
	w.acked = true
	qp.complete()
}

// failOutstanding fails the oldest outstanding WQE (retry exhaustion).
func (qp *QP) failOutstanding(status WCStatus) {
	if w, ok := qp.nextUnacked(qp.comp.psn); ok {
		qp.failWQE(w, status)
	}
}

// complete retires acknowledged WQEs from the head of the send queue in
// order, posting a completion for the signaled ones and for every failure.
func (qp *QP) complete() {
	c := &qp.comp
	sq := qp.cfg.SQ
	_, tail := sq.bounds()
	for c.wqe != tail {
		w := sq.slot(c.wqe)
		if !w.acked {
			break
		}
		if w.isReadOrAtomic() && w.sent && w.failed == WCSuccess {
			// Counted since it was sent. One that a rewind took back
			// (sent false) and its first transmission's response then
			// completed is no longer counted.
			qp.req.rdAtomicOut--
		}
		wc := WC{WRID: w.wr.WRID, Status: w.failed, Opcode: wcOpcodeOf(w.wr.Opcode), QPNum: qp.cfg.QPN}
		if w.failed == WCSuccess {
			wc.ByteLen = uint32(w.length)
		}
		post := w.signaled || w.failed != WCSuccess
		c.wqe++
		sq.retire(c.wqe) // free the slot before the completion shows; w may be reused from here
		if post {
			qp.cfg.SendCQ.Push(wc, false)
		}
		if wc.Status == WCSuccess && wc.Opcode == WCSend {
			qp.cfg.Stats.Inc(stats.RDMASends)
		}
		if wc.Status != WCSuccess {
			qp.fatal(wc.Status)
			return
		}
	}
	c.normalize(qp, tail)
	if qp.req.wqe-c.wqe > 1<<62 {
		// The requester never lags the completer. It did here because
		// responses to a first transmission completed WQEs it was
		// resending: it goes on from the oldest PSN still needed, where
		// it would have got to, and never at PSNs those WQEs used.
		qp.req.wqe, qp.req.offset = c.wqe, 0
		qp.skipAcked()
	}
}
