package cpus

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLineRoundTrip: on two CPUs or more a cache line's round trip is
// measured, and takes more than nothing and less than a wake-up; on one it
// is 0, unknown, and the call returns.
func TestLineRoundTrip(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	rt := LineRoundTrip(20 * time.Millisecond)
	if set.Count() < 2 || runtime.GOMAXPROCS(0) < 2 {
		if rt != 0 {
			t.Errorf("one CPU: %v, want 0", rt)
		}
		return
	}
	if rt <= 0 || rt > 50*time.Microsecond {
		t.Errorf("round trip %v", rt)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if rt := LineRoundTrip(20 * time.Millisecond); rt != 0 {
		t.Errorf("one P: %v, want 0", rt)
	}
}
