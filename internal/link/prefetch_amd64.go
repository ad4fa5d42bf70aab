//go:build !purego

package link

// prefetchW asks the CPU for the cache lines [p, p+64*lines), to be
// written (PREFETCHW: owned, the other cores' copies invalidated). A
// prefetch is a hint: it never faults, whatever the address.
//
//go:noescape
func prefetchW(p *byte, lines int)

// prefetchT0 asks the CPU for the cache lines [p, p+64*lines), to be read.
//
//go:noescape
func prefetchT0(p *byte, lines int)

// hasPrefetchW reports whether the CPU has PREFETCHW (CPUID
// 0x80000001:ECX.PRFCHW).
func hasPrefetchW() bool

var canPrefetchW = hasPrefetchW()

// prefetchWrite asks for lines to be written: PREFETCHW where the CPU has
// it, a prefetch for reading otherwise.
func prefetchWrite(p *byte, lines int) {
	if canPrefetchW {
		prefetchW(p, lines)
	} else {
		prefetchT0(p, lines)
	}
}

// prefetchRead asks for lines to be read.
func prefetchRead(p *byte, lines int) { prefetchT0(p, lines) }
