// Package prefetch asks the CPU to bring cache lines in ahead of their
// use: a line another core wrote last, or one evicted since, then arrives
// while other work goes on instead of stalling the load or store that
// needs it. A prefetch is a hint: it never faults, whatever the address,
// and changes no memory.
//
// On amd64 Write is PREFETCHW (the line is fetched owned, the other
// cores' copies invalidated, where the CPU has the instruction, otherwise
// PREFETCHT0) and Read is PREFETCHT0; elsewhere, and with the purego
// build tag, both do nothing.
package prefetch

import "unsafe"

// LineSize is the cache line size the requests count in.
const LineSize = 64

// Write asks for the lines [p, p+lines*LineSize), to be written.
func Write(p unsafe.Pointer, lines int) { write(p, lines) }

// Read asks for the lines [p, p+lines*LineSize), to be read.
func Read(p unsafe.Pointer, lines int) { read(p, lines) }

// ReadSlice asks for the lines b lies in, to be read: from b's first byte
// in steps of a line, as many steps as b has lines, so that a b that does
// not start on a line is covered to its last byte too.
func ReadSlice(b []byte) {
	if len(b) == 0 {
		return
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	off := int(uintptr(p) & (LineSize - 1))
	read(p, (off+len(b)+LineSize-1)/LineSize)
}
