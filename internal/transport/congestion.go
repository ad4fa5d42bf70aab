package transport

import "github.com/goroce/goroce/internal/psn"

// congestion is how a requester slows down when what it sends goes
// unanswered: a congestion window in PSNs under the send window, cut to
// minCwnd by a silence (an early go-back or an ACK timeout) and grown
// again by acknowledgements, in the manner of TCP's retransmission
// timeout and slow start (RFC 5681). It is the requester's own flow
// control and invisible on the wire.
//
//	no silence seen           the send window (cwnd 0: nothing to track)
//	silence                   ssthresh: half the PSNs in flight (once per
//	                          window sent before it); cwnd: minCwnd
//	acknowledged PSNs         below ssthresh cwnd grows by each (slow start),
//	                          above it by one per cwnd acknowledged
//	cwnd back at the window   tracking stops
//	silence proved spurious   the window before the silence is restored
//
// A silence is what a receiver that cannot keep up causes: its host did
// not run it, or more QPs send to it than it can take, and the kernel
// drops the rest of every burst when its socket buffer is full, so no
// packet after the loss arrives to draw a NAK. Resending every QP's whole
// window then overflows the buffer again, loss after loss; resending
// minCwnd+1 packets and growing from there does not.
//
// A silence can be a delay, not a loss: on a busy host the responder's
// process, or the requester's, is not run for some milliseconds and the
// ACKs come late. The first response after the go-back then acknowledges
// PSNs the requester had not resent since (the first transmission
// arrived), and the cut is undone, as TCP's Eifel and F-RTO undo a
// spurious retransmission timeout (RFC 3522, RFC 5682).
//
// A sequence NAK does not cut the window. It shows the responder took a
// packet after the lost one, which random loss on a path that is not
// congested does, and go-back-N already resends the window behind it.
// Cutting the window on NAKs as Reno does (by half, or by 0.7 as CUBIC)
// cost 2.5 to 3 times the goodput at 2% and 5% loss and gained nothing
// at a receiver that overflows.
//
// Chosen by measurement: docs/design/tuning.md#loss-response.
type congestion struct {
	window
	saved   window // the window before the first silence since the last response
	canUndo bool   // saved holds it
}

// window is the state of a congestion window.
type window struct {
	cwnd       int     // PSNs the requester may have in flight beyond the oldest unacknowledged; 0: the send window
	ssthresh   int     // where slow start ends
	grown      int     // PSNs acknowledged in congestion avoidance since cwnd last grew
	recover    psn.PSN // while recovering: one past the highest PSN sent at the first silence
	recovering bool
}

// minCwnd is the smallest congestion window: a QP that timed out resends
// its oldest packet and the one after it, each asking for an ACK.
const minCwnd = 1

// limit returns the window in force under a send window of win PSNs.
func (c *congestion) limit(win int) int {
	if c.cwnd > 0 && c.cwnd < win {
		return c.cwnd
	}
	return win
}

// silent answers a silence with flight PSNs in flight and maxPSN one
// past the highest sent, under a send window of win PSNs: unless no more
// than minCwnd+1 PSNs are in flight, cwnd drops to minCwnd; ssthresh
// halves, unless this silence comes while recovering
// from an earlier one, before the PSNs in flight then were acknowledged.
func (c *congestion) silent(maxPSN psn.PSN, flight, win int) {
	if flight <= minCwnd+1 {
		// What the cut window would let out is all there is: a silence
		// with so little in flight is no sign of a receiver overrun (a
		// lone message's resend cannot tell a late ACK from a lost one).
		return
	}
	if !c.canUndo {
		c.saved, c.canUndo = c.window, true
	}
	if !c.recovering {
		cur := min(c.limit(win), flight)
		c.ssthresh = max(cur/2, minCwnd)
		c.recover, c.recovering = maxPSN, true
	}
	c.cwnd, c.grown = minCwnd, 0
}

// acked grows the window for n PSNs newly acknowledged, up to comp (the
// oldest PSN not acknowledged now), under a send window of win PSNs.
// spurious says the response acknowledged PSNs not sent since the last
// silence: the silence was no loss, and the window goes back to what it
// was before it. It reports whether it did so.
func (c *congestion) acked(n int, comp psn.PSN, win int, spurious bool) (undone bool) {
	if spurious && c.canUndo {
		c.window, undone = c.saved, true
	}
	c.canUndo = false
	if c.cwnd == 0 || n <= 0 {
		return undone
	}
	if c.recovering && !comp.Before(c.recover) {
		c.recovering = false
	}
	if c.cwnd < c.ssthresh {
		c.cwnd += n
	} else {
		c.grown += n
		for c.grown >= c.cwnd {
			c.grown -= c.cwnd
			c.cwnd++
		}
	}
	if c.cwnd >= win {
		*c = congestion{}
	}
	return undone
}
