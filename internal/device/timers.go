package device

import (
	"container/heap"
	"time"

	"github.com/goroce/goroce/internal/monotime"
)

// The QPs' timers (rxe: the retransmit and RNR timers, one kernel timer
// per QP). A worker keeps the deadlines of its QPs in a min-heap and one
// runtime timer set for the earliest; when it fires, the worker runs
// Timeout on every QP whose deadline has passed.
//
// A QP's deadline changes only while the worker runs it (a packet, a kick,
// a call, a timeout), and each of those ends in runDirty, which calls track:
// so the heap stays exact at O(log n) per change, and a worker with
// 100,000 idle QPs does not scan them after every event.

// timerHeap is a min-heap of QPs by deadline; QP.tIndex is its index + 1.
type timerHeap []*QP

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].tAt < h[j].tAt }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].tIndex, h[j].tIndex = i+1, j+1
}
func (h *timerHeap) Push(x any) {
	qp := x.(*QP)
	qp.tIndex = len(*h) + 1
	*h = append(*h, qp)
}
func (h *timerHeap) Pop() any {
	old := *h
	qp := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	qp.tIndex = 0
	return qp
}

// track files qp's deadline d (zero: none) in h.
func (h *timerHeap) track(qp *QP, d monotime.Time) {
	if d == qp.tAt && d.IsZero() == (qp.tIndex == 0) {
		return
	}
	qp.tAt = d
	switch {
	case d.IsZero() && qp.tIndex > 0:
		heap.Remove(h, qp.tIndex-1)
	case d.IsZero():
	case qp.tIndex > 0:
		heap.Fix(h, qp.tIndex-1)
	default:
		heap.Push(h, qp)
	}
}

// remove takes qp out of h.
func (h *timerHeap) remove(qp *QP) {
	if qp.tIndex > 0 {
		heap.Remove(h, qp.tIndex-1)
	}
}

// expired pops the QPs whose deadline is at or before now, in deadline
// order, calling fn for each.
func (h *timerHeap) expired(now monotime.Time, fn func(*QP)) {
	for len(*h) > 0 && !now.Before((*h)[0].tAt) {
		qp := heap.Pop(h).(*QP)
		qp.tAt = 0
		fn(qp)
	}
}

// earliest returns the earliest deadline, or the zero Time for none.
func (h timerHeap) earliest() monotime.Time {
	if len(h) == 0 {
		return 0
	}
	return h[0].tAt
}

// timerSet is the runtime timer a worker sets for its earliest deadline.
// It moves the timer only when the deadline comes sooner than the one the
// timer is set for: a timer that fires early finds nothing due and is set
// again. Most turns move a deadline later (an ACK restarts the retry timer
// of a QP that is still sending), and leaving the timer alone then saves
// two operations on the runtime's timer heap, with its lock, per message.
type timerSet struct {
	at    monotime.Time // when the timer fires; zero: it is not set
	reset func(after time.Duration)
}

// arm makes sure the timer fires by deadline (zero: none); now reads the
// time of the step, only if the timer must move.
func (t *timerSet) arm(deadline monotime.Time, now func() monotime.Time) {
	if deadline.IsZero() {
		return // an armed timer fires once more and finds nothing due
	}
	if !t.at.IsZero() && !deadline.Before(t.at) {
		return
	}
	t.reset(max(deadline.Sub(now()), 0))
	t.at = deadline
}

// fired notes that the timer fired and is no longer set.
func (t *timerSet) fired() { t.at = 0 }
