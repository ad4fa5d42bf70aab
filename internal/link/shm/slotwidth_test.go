package shm

import "testing"

// TestSlotWidth: a trial at the start and every widthEvery batches with
// large packets alternates the widths and keeps the faster one per byte,
// whole slots only by widthMargin; small batches count for nothing.
func TestSlotWidth(t *testing.T) {
	// run sends batches of 16 KiB through w, narrow ones taking narrow ns
	// per byte and wide ones wide, until it has sent n; it returns how
	// many went wide and whether w ends wide.
	run := func(w *slotWidth, n int, narrow, wide float64) (wides int, ends bool) {
		const bytes = 16 << 10
		for range n {
			isWide, timed := w.next()
			rate := narrow
			if isWide {
				rate, wides = wide, wides+1
			}
			w.note(isWide, timed, int64(rate*bytes), bytes)
		}
		return wides, w.wide
	}
	for _, tc := range []struct {
		name         string
		narrow, wide float64 // ns per byte
		wantWide     bool
	}{
		{"close together: narrow is quicker", 0.050, 0.053, false},
		{"whole slots within the margin", 0.050, 0.048, false},
		{"far apart: whole slots", 0.180, 0.105, true},
	} {
		w := &slotWidth{trial: widthTrial}
		wides, ends := run(w, widthTrial+widthEvery, tc.narrow, tc.wide)
		if ends != tc.wantWide {
			t.Errorf("%s: wide %v, want %v", tc.name, ends, tc.wantWide)
		}
		want := widthTrial / 2
		if tc.wantWide {
			want += widthEvery
		}
		if wides != want {
			t.Errorf("%s: %d wide batches of %d, want %d", tc.name, wides, widthTrial+widthEvery, want)
		}
	}

	// The host moves the vCPUs: the next trial follows.
	w := &slotWidth{trial: widthTrial}
	if _, wide := run(w, widthTrial+widthEvery, 0.180, 0.105); !wide {
		t.Fatal("far apart: not wide")
	}
	if _, wide := run(w, widthTrial, 0.050, 0.053); wide {
		t.Error("close together again: still wide after a trial")
	}

	// A batch held up (the thread preempted) in one width does not decide:
	// each width's best batch counts.
	w = &slotWidth{trial: widthTrial}
	for i := 0; w.trial > 0; i++ {
		isWide, timed := w.next()
		rate := 0.050
		if isWide {
			rate = 0.053
		}
		if !isWide && i == 0 {
			rate = 5 // one slow narrow batch
		}
		w.note(isWide, timed, int64(rate*16384), 16384)
	}
	if w.wide {
		t.Error("one slow narrow batch made whole slots win")
	}

	// Batches of small packets neither count nor time.
	w = &slotWidth{}
	for range 2 * widthEvery {
		w.note(false, false, 10, widthMinBytes-1)
	}
	if w.trial != 0 || w.n != 0 {
		t.Errorf("small batches counted: trial %d, n %d", w.trial, w.n)
	}
}
