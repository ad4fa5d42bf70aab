package monotime

import (
	"testing"
	"time"
)

// TestNow: readings are never zero and never go backwards.
func TestNow(t *testing.T) {
	prev := Now()
	for range 1000 {
		now := Now()
		if now.IsZero() {
			t.Fatal("Now returned the zero Time")
		}
		if now.Before(prev) {
			t.Fatalf("Now went backwards: %d after %d", now, prev)
		}
		prev = now
	}
}

// TestArithmetic checks Add, Sub, Before and After against each other.
func TestArithmetic(t *testing.T) {
	t0 := Time(1000)
	t1 := t0.Add(250 * time.Nanosecond)
	if got := t1.Sub(t0); got != 250*time.Nanosecond {
		t.Errorf("Sub = %v, want 250ns", got)
	}
	if !t0.Before(t1) || t1.Before(t0) || !t1.After(t0) || t0.After(t1) {
		t.Error("Before/After disagree with Add")
	}
	if t0.Before(t0) || t0.After(t0) {
		t.Error("a Time is before or after itself")
	}
	var zero Time
	if !zero.IsZero() || t0.IsZero() {
		t.Error("IsZero")
	}
	if d := Until(Now().Add(time.Hour)); d <= 0 || d > time.Hour {
		t.Errorf("Until an hour from now = %v", d)
	}
	if d := Since(Now()); d < 0 {
		t.Errorf("Since now = %v", d)
	}
}
