package transport

import "sync/atomic"

// Placement decides how the responders of one device store RDMA WRITE
// payload: with ordinary stores, which leave the target in the cache, or
// with non-temporal stores (internal/ntcopy), which write it to memory
// around the cache, as a NIC's DMA does. The second costs half the memory
// traffic when the target is not in any cache (no line is read before it
// is overwritten) and more time when it is (the lines leave the cache for
// memory), so the choice rests on how likely the target is to still be
// cached. An application that reads the data then finds it in memory, as
// it would after a NIC's DMA.
//
// The measure is a reuse distance: the bytes of WRITE payload the device
// placed since this QP's previous WRITE, plus the message's own length
// (the bytes written between two writes of the same target byte when a QP
// rewrites one buffer, as perftest's do, or streams through a larger one).
// Every byte placed also went through the kernel's socket buffer and
// goroce's receive buffer, three bytes of cache traffic or more for one
// of payload, so a target whose distance exceeds a third of the
// last-level cache has most likely left it. On an AMD EPYC with a 32 MiB
// L3 (docs/perf/HISTORY.md, twelfth round), non-temporal stores made the
// copy of a 4 KiB packet into a cold target 1.4× as fast and into a
// cached one 3.4× as slow; always used, they lost against ordinary stores
// with 1 and 64 QPs writing 64 KiB each (64 KiB and 4 MiB of distance);
// used from this distance on, 256 and 1024 QPs moved 1.16× and 1.25× the
// bytes in one process with 0.9× the CPU per byte.
type Placement struct {
	// Distance is the reuse distance in bytes from which a message is
	// placed with non-temporal stores; 0 never does.
	Distance uint64
	clock    atomic.Uint64 // WRITE payload bytes placed by the device's QPs
}

// NewPlacement returns the placement policy for a device whose last-level
// cache holds llc bytes (0 if unknown, which places every message the
// ordinary way).
func NewPlacement(llc int) *Placement {
	return &Placement{Distance: uint64(llc) / 3}
}

// cold accounts a WRITE message of n bytes to a QP whose previous one
// ended at clock *last (0: none) and reports whether its target is likely
// out of cache.
func (p *Placement) cold(last *uint64, n uint64) bool {
	if p == nil || p.Distance == 0 {
		return false
	}
	now := p.clock.Add(n)
	d := n
	if *last != 0 {
		d += now - n - *last
	}
	*last = now
	return d >= p.Distance
}
