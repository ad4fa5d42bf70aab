package shm

// slotWidth decides how much of a ring slot ahead the same-host sender
// asks for (prefetchSlot): the lines its packet takes up to
// shmPrefetchLines, or the whole slot. Where the two CPUs share a cache
// the narrow request is the better one; where the host has put them far
// apart, a slot's lines were read last by the far CPU and each store
// waits for its copy to be invalidated, and asking for all of them at once
// is (docs/design/tuning.md#slot-width). The host moves the vCPUs while a
// channel lives, so the sender compares the two as it runs: a channel
// starts narrow, and every widthEvery batches with large packets the
// sender times widthTrial batches, alternating the two widths, and keeps
// the width whose best batch took less time per byte (whole slots only by
// widthMargin; each width's best batch, so that a batch held up by the
// scheduler does not decide). Both widths keep the ring in the caches, so
// the receiver's cost hardly depends on the choice and the sender's own
// time tells it.
type slotWidth struct {
	wide  bool       // ask for whole slots between trials
	n     int        // untimed batches since the last trial
	trial int        // > 0: batches left in the trial under way
	best  [2]float64 // the trial's least time per byte, narrow and wide; 0: none yet
}

const (
	widthEvery = 256 // batches with large packets between trials
	widthTrial = 16  // batches a trial times, half of each width
	// widthMargin is how much less time per byte whole slots must take
	// to be chosen.
	widthMargin = 0.95
	// widthLargePacket is the least size of the packets a batch is timed
	// by, and widthMinBytes the least they must hold together for the
	// batch to count: below it the clock's resolution would decide.
	widthLargePacket = 1024
	widthMinBytes    = 1024
)

// next says whether the sender's next batch asks for whole slots and
// whether it is timed (note).
func (w *slotWidth) next() (wide, timed bool) {
	if w.trial > 0 {
		return w.trial%2 == 1, true
	}
	return w.wide, false
}

// note records a batch sent with the width next gave: bytes of large
// packets that took ns, if it was timed.
func (w *slotWidth) note(wide, timed bool, ns, bytes int64) {
	if bytes < widthMinBytes {
		return
	}
	if !timed {
		if w.n++; w.n >= widthEvery {
			w.n, w.trial, w.best = 0, widthTrial, [2]float64{}
		}
		return
	}
	i := 0
	if wide {
		i = 1
	}
	if r := float64(ns) / float64(bytes); w.best[i] == 0 || r < w.best[i] {
		w.best[i] = r
	}
	if w.trial--; w.trial == 0 {
		w.wide = w.best[0] > 0 && w.best[1] > 0 && w.best[1] < widthMargin*w.best[0]
	}
}
