package psn

import (
	"math/rand/v2"
	"testing"
)

func TestDiff(t *testing.T) {
	tests := []struct {
		p, q PSN
		want int
	}{
		{5, 3, 2},
		{3, 5, -2},
		{0, Mask, 1},               // wrap: 0 follows 0xffffff
		{Mask, 0, -1},              // and 0xffffff precedes 0
		{2, Mask - 1, 4},           // across the wrap
		{HalfSpace, 0, -HalfSpace}, // exactly half way: ambiguous, reported negative
		{HalfSpace - 1, 0, HalfSpace - 1},
		{0, HalfSpace - 1, -(HalfSpace - 1)},
		{7, 7, 0},
	}
	for _, tt := range tests {
		if got := tt.p.Diff(tt.q); got != tt.want {
			t.Errorf("%v.Diff(%v) = %d, want %d", tt.p, tt.q, got, tt.want)
		}
	}
}

func TestAddAndCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for range 100000 {
		p := New(rng.Uint32())
		n := rng.IntN(HalfSpace-1) + 1
		q := p.Add(n)
		if q.Diff(p) != n || !q.After(p) || !p.Before(q) || q.Before(p) {
			t.Fatalf("p=%v n=%d q=%v: Diff %d After %v Before %v", p, n, q, q.Diff(p), q.After(p), p.Before(q))
		}
		if back := q.Add(-n); back != p {
			t.Fatalf("%v.Add(%d).Add(-%d) = %v", p, n, n, back)
		}
		if uint32(q) > Mask {
			t.Fatalf("Add left %#x unreduced", uint32(q))
		}
	}
	if got := PSN(Mask).Next(); got != 0 {
		t.Errorf("Next of 0xffffff = %v, want 0", got)
	}
	if New(0x1234567) != 0x234567 {
		t.Errorf("New does not reduce to 24 bits")
	}
}

func TestInWindow(t *testing.T) {
	first := PSN(Mask - 2) // the window 0xfffffd..0x00007c wraps
	for d := -5; d < 135; d++ {
		p := first.Add(d)
		if got, want := p.InWindow(first, 128), d >= 0 && d < 128; got != want {
			t.Errorf("%v in [%v, +128): %v, want %v", p, first, got, want)
		}
	}
}

func TestString(t *testing.T) {
	if s := PSN(0x2c7304).String(); s != "0x2c7304" {
		t.Errorf("String = %q", s)
	}
}
