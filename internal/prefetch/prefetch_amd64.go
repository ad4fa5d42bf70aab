//go:build !purego

package prefetch

import "unsafe"

//go:noescape
func prefetchW(p unsafe.Pointer, lines int)

//go:noescape
func prefetchT0(p unsafe.Pointer, lines int)

// hasPrefetchW reports whether the CPU has PREFETCHW (CPUID
// 0x80000001:ECX.PRFCHW).
func hasPrefetchW() bool

var canPrefetchW = hasPrefetchW()

func write(p unsafe.Pointer, lines int) {
	if canPrefetchW {
		prefetchW(p, lines)
	} else {
		prefetchT0(p, lines)
	}
}

func read(p unsafe.Pointer, lines int) { prefetchT0(p, lines) }
