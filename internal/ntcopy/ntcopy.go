// Package ntcopy copies with non-temporal stores, which write a buffer to
// memory around the caches: a store to a line that is not in any cache then
// costs no read of that line from DRAM first (no read-for-ownership), and
// the copy evicts nothing that other work still needs.
//
// goroce places an RDMA WRITE's payload this way when its target is
// unlikely to be in a cache (see transport.Placement), as a NIC's DMA
// would: a copy that does not fit the cache costs about half the memory
// traffic, and a target that does fit is better written the usual way,
// since it stays where the next message or its reader finds it.
package ntcopy

import "unsafe"

// Copy copies min(len(dst), len(src)) bytes from src to dst and returns
// the count, as copy does, writing dst's whole 64-byte blocks with
// non-temporal stores (on amd64; elsewhere, and with the purego build tag,
// it is copy). The slices must not overlap. The stores are ordered before
// any store that follows Copy (it ends with a store fence), so a
// completion written after it never becomes visible before the data.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < minCopy {
		return copy(dst, src[:n])
	}
	dst, src = dst[:n], src[:n]
	head := int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst))) & (block - 1))
	copy(dst[:head], src[:head])
	m := head + copyBlocks(dst[head:], src[head:])
	copy(dst[m:], src[m:])
	return n
}

const (
	block   = 64  // a cache line: non-temporal stores of whole lines combine into one write
	minCopy = 256 // below this, partial lines at the ends dominate: Copy is copy
)
