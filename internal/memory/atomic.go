package memory

import (
	"sync/atomic"
	"unsafe"
)

// The atomic operations of IBA 9.4.5 (CMP_SWAP, FETCH_ADD) and the
// ATOMIC_WRITE of the Memory Placement Extensions act on 8 bytes of
// registered memory, which hold a uint64 in host byte order, as in rxe
// (*(u64 *)vaddr); the wire carries the operands big-endian and the
// transport converts them. The operations use the CPU's atomic
// instructions, so local programs that use sync/atomic on the same memory
// see them whole.
//
// b is what CheckAtomic returned: its first 8 bytes must be 8-byte aligned
// in memory, or the functions panic.

// CompareSwap stores swap in b if b holds compare, and returns the value b
// held before.
func CompareSwap(b []byte, compare, swap uint64) (old uint64) {
	p := word(b)
	for {
		old = atomic.LoadUint64(p)
		if old != compare || atomic.CompareAndSwapUint64(p, compare, swap) {
			return old
		}
	}
}

// FetchAdd adds add to the value in b, modulo 2^64, and returns the value
// b held before.
func FetchAdd(b []byte, add uint64) (old uint64) {
	return atomic.AddUint64(word(b), add) - add
}

// AtomicWrite stores v in b with one atomic 8-byte store (ATOMIC_WRITE).
func AtomicWrite(b []byte, v uint64) {
	atomic.StoreUint64(word(b), v)
}

// word returns b's first 8 bytes as a *uint64.
func word(b []byte) *uint64 {
	if len(b) < 8 {
		panic("memory: atomic operation on fewer than 8 bytes")
	}
	p := unsafe.Pointer(unsafe.SliceData(b)) // not &b[0]: the race detector would count a read
	if uintptr(p)&7 != 0 {
		panic("memory: atomic operation on memory that is not 8-byte aligned")
	}
	return (*uint64)(p)
}
