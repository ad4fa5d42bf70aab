//go:build linux

package ntcopy

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{{"32768K", 32 << 20}, {"512K", 512 << 10}, {"8M", 8 << 20}, {"64", 64}, {"", 0}, {"xK", 0}, {"-1K", 0}} {
		if got := parseSize(c.in); got != c.want {
			t.Errorf("parseSize(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestLastLevelCache reads this machine's caches: a Linux machine with
// sysfs reports at least its L2 (every CPU goroce runs on has one).
func TestLastLevelCache(t *testing.T) {
	n := LastLevelCache()
	t.Logf("last-level cache: %d KiB", n>>10)
	if n == 0 {
		t.Skip("no cache sizes in sysfs")
	}
	if n < 64<<10 {
		t.Fatalf("LastLevelCache() = %d, smaller than any unified cache", n)
	}
}

// FuzzParseSize: any string yields a size that is 0 or what its digits and
// suffix say, never a negative one or a panic.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"32768K", "512K", "8M", "64", "", "K", "9999999999999999999K", "1G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := parseSize(s)
		if n < 0 {
			t.Fatalf("parseSize(%q) = %d", s, n)
		}
		if n == 0 {
			return
		}
		// What it accepted reads the same spelled out in bytes, and a
		// suffix multiplied the digits before it.
		digits, mult := s, 1
		switch {
		case strings.HasSuffix(s, "K"):
			digits, mult = s[:len(s)-1], 1<<10
		case strings.HasSuffix(s, "M"):
			digits, mult = s[:len(s)-1], 1<<20
		}
		d, err := strconv.Atoi(digits)
		if err != nil || d*mult != n || parseSize(strconv.Itoa(n)) != n {
			t.Fatalf("parseSize(%q) = %d: not %q times %d", s, n, digits, mult)
		}
	})
}
