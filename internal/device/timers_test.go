package device

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/monotime"
)

// TestTimerHeap files deadlines, moves and removes them, and takes the
// expired ones in deadline order.
func TestTimerHeap(t *testing.T) {
	var h timerHeap
	qps := make([]*QP, 5)
	for i := range qps {
		qps[i] = &QP{qpn: uint32(0x11 + i)}
	}
	h.track(qps[0], 50)
	h.track(qps[1], 10)
	h.track(qps[2], 30)
	h.track(qps[3], 0) // no deadline: not filed
	h.track(qps[4], 40)
	if h.earliest() != 10 || len(h) != 4 {
		t.Fatalf("earliest %d of %d, want 10 of 4", h.earliest(), len(h))
	}
	h.track(qps[1], 60) // moves later
	h.track(qps[4], 0)  // disarmed
	h.remove(qps[2])
	if h.earliest() != 50 || len(h) != 2 {
		t.Fatalf("earliest %d of %d, want 50 of 2", h.earliest(), len(h))
	}
	h.track(qps[2], 20)
	var got []uint32
	h.expired(55, func(qp *QP) { got = append(got, qp.qpn) })
	if len(got) != 2 || got[0] != 0x13 || got[1] != 0x11 {
		t.Errorf("expired at 55: %#x, want 0x13, 0x11", got)
	}
	if len(h) != 1 || h.earliest() != 60 || qps[1].tIndex != 1 {
		t.Errorf("left %d, earliest %d", len(h), h.earliest())
	}
	for _, qp := range qps[:3] {
		if qp != qps[1] && (qp.tIndex != 0 || qp.tAt != 0) {
			t.Errorf("QP %#x still filed: index %d, deadline %d", qp.qpn, qp.tIndex, qp.tAt)
		}
	}
}

// TestTimerSetArm: the timer moves only when the earliest deadline comes
// sooner than the one it is set for, and then for the time left; a later
// deadline leaves it alone (it fires early and is set again), and the
// clock is read only when the timer moves.
func TestTimerSetArm(t *testing.T) {
	var resets []time.Duration
	reads := 0
	now := monotime.Time(1000)
	clock := func() monotime.Time { reads++; return now }
	ts := timerSet{reset: func(d time.Duration) { resets = append(resets, d) }}

	ts.arm(0, clock)
	if ts.at != 0 || len(resets) != 0 {
		t.Fatalf("no deadline: timer set for %v", ts.at)
	}
	ts.arm(now.Add(time.Hour), clock)
	if ts.at != now.Add(time.Hour) || resets[0] != time.Hour {
		t.Fatalf("timer at %v after %v, want the only deadline", ts.at, resets)
	}
	ts.arm(now.Add(20*time.Millisecond), clock)
	if ts.at != now.Add(20*time.Millisecond) || resets[1] != 20*time.Millisecond {
		t.Fatalf("timer at %v after %v, want the sooner deadline", ts.at, resets)
	}
	ts.arm(now.Add(time.Minute), clock)
	if len(resets) != 2 || reads != 2 {
		t.Errorf("a later deadline moved the timer (%v) or read the clock (%d reads)", resets, reads)
	}
	ts.arm(now.Add(-time.Second), clock) // past: fires at once
	if resets[2] != 0 {
		t.Errorf("a past deadline set the timer for %v", resets[2])
	}
	ts.fired()
	ts.arm(now.Add(time.Minute), clock)
	if ts.at != now.Add(time.Minute) {
		t.Errorf("after firing the timer was not set again")
	}
}

// TestDirtyListsNested: a run of the dirty QPs inside another (Settle's
// call taken from the channel by a run's loop) keeps the QPs made dirty
// after it began; it once emptied the list the outer run was filling,
// which then ran a nil QP.
func TestDirtyListsNested(t *testing.T) {
	var w worker
	qps := make([]*QP, 4)
	for i := range qps {
		qps[i] = &QP{qpn: uint32(0x11 + i)}
	}
	w.markDirty(qps[0])
	w.doneDirty(w.takeDirty()) // a whole run: the spare list now exists
	qps[0].dirty = false

	w.markDirty(qps[1])
	outer := w.takeDirty()
	qps[1].dirty = false
	w.markDirty(qps[2]) // made dirty during the outer run
	inner := w.takeDirty()
	qps[2].dirty = false
	w.markDirty(qps[3]) // made dirty during the inner run
	w.doneDirty(inner)
	if len(w.dirty) != 1 || w.dirty[0] != qps[3] {
		t.Fatalf("dirty list after the inner run %v, want QP %#x", w.dirty, qps[3].qpn)
	}
	w.doneDirty(outer)
	if len(w.dirty) != 1 || w.dirty[0] != qps[3] {
		t.Fatalf("dirty list after the outer run %v, want QP %#x", w.dirty, qps[3].qpn)
	}
}
