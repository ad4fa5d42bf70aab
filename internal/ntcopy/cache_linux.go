//go:build linux

package ntcopy

import (
	"math"
	"os"
	"strconv"
	"strings"
)

// LastLevelCache returns the size in bytes of the largest unified cache of
// CPU 0 as Linux reports it (sysfs), or 0 if it cannot tell.
func LastLevelCache() int {
	const dir = "/sys/devices/system/cpu/cpu0/cache/"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	best := 0
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "index") {
			continue
		}
		typ, err := os.ReadFile(dir + e.Name() + "/type")
		if err != nil || strings.TrimSpace(string(typ)) != "Unified" {
			continue
		}
		size, err := os.ReadFile(dir + e.Name() + "/size")
		if err != nil {
			continue
		}
		best = max(best, parseSize(strings.TrimSpace(string(size))))
	}
	return best
}

// parseSize reads sysfs's cache sizes: "32768K", "1024K", "8M"; 0 if it
// is none of those or too large for an int.
func parseSize(s string) int {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > math.MaxInt/mult {
		return 0
	}
	return n * mult
}
