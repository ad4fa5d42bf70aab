package transport

import (
	"sync/atomic"

	"github.com/goroce/goroce/internal/ntcopy"
	"github.com/goroce/goroce/internal/wire"
)

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
// last-level cache has most likely left it. Below that distance ordinary
// stores are the better ones: a target the cache still holds, such as
// the buffer one QP or a few rewrite, is written there and stays there.
// Chosen by measurement: docs/design/tuning.md#placement-distance.
//
// The same measure over the payload the device's requesters gather from
// their sources (a clock of its own) tells a requester whether the source
// of a message of more than one packet it starts is likely out of cache
// (coldSource). It then asks for each packet's payload lines as it emits
// the packet (internal/prefetch), so that they come from memory while it
// builds the rest of the batch, before the link reads them to copy and
// checksum them; without it each packet stalls on its own lines, since
// the hardware prefetcher stops at each page and a 4 KiB packet is a
// page. Only cold messages ask: for a cached source the prefetches are
// pure cost, each waiting on a miss buffer. A QP's turn sends several
// messages from one source (up to minGrant PSNs), and only the first of
// them is cold.
// Chosen by measurement: docs/design/tuning.md#cold-sources.
type Placement struct {
	// Distance is the reuse distance in bytes from which a message is
	// placed with non-temporal stores, or its source prefetched; 0
	// never does either.
	Distance uint64
	clock    atomic.Uint64 // WRITE payload bytes placed by the device's QPs
	gathered atomic.Uint64 // payload bytes the device's requesters gathered from their sources
}

// NewPlacement returns the placement policy for a device whose last-level
// cache holds llc bytes (0 if unknown, which places every message the
// ordinary way).
func NewPlacement(llc int) *Placement {
	return &Placement{Distance: uint64(llc) / 3}
}

// reuse is what Placement keeps of one QP's WRITEs, or of its sources.
type reuse struct {
	last uint64 // the clock after the QP's last message; 0: none yet
	gap  uint64 // bytes the device placed (or gathered) between the run before and this run's first message
	run  uint64 // bytes of this run: a message and those that continued it
}

// cold accounts a WRITE message of n bytes to the QP whose WRITEs u
// follows and reports whether its target is likely out of cache.
//
// A message that continues the QP's previous one (cont: it starts where
// that one ended, as the WRITE_ONLY packets of a split WRITE do,
// Path.SplitWrites) extends a run: its distance is the run's length so
// far plus the gap before the run, what the distance of the whole run
// would have been had it come as one message, as a peer that does not
// split sends it.
func (p *Placement) cold(u *reuse, n uint64, cont bool) bool {
	if p == nil || p.Distance == 0 {
		return false
	}
	return u.distance(&p.clock, n, cont) >= p.Distance
}

// coldSource accounts a message of n bytes that a requester starts to
// gather from its source to the QP whose sources u follows, and reports
// whether that source is likely out of cache: the payload the device's
// requesters gathered since the QP's previous message, plus the
// message's own, reaches Distance.
func (p *Placement) coldSource(u *reuse, n uint64) bool {
	if p == nil || p.Distance == 0 {
		return false
	}
	return u.distance(&p.gathered, n, false) >= p.Distance
}

// distance moves clock on by a message of n bytes and returns the
// message's reuse distance: its run's length (with cont, the message
// extends the run of the one before) plus the gap before the run.
func (u *reuse) distance(clock *atomic.Uint64, n uint64, cont bool) uint64 {
	now := clock.Add(n)
	if !cont {
		u.gap, u.run = 0, 0
		if u.last != 0 {
			u.gap = now - n - u.last
		}
	}
	u.run += n
	u.last = now
	return u.run + u.gap
}

// copyPayloadNT is p.CopyPayload with non-temporal stores (internal/ntcopy),
// for a target that cold judged likely out of cache. A packet whose ICRC
// check was deferred is checked and copied in one pass with ordinary
// stores, as by CopyPayload: a second pass over the payload, to check it
// before storing it around the cache, costs more than the stores save.
// Chosen by measurement: docs/design/tuning.md#deferred-icrc-placement.
func copyPayloadNT(p *wire.Packet, dst []byte) bool {
	if p.ICRCPending() {
		return p.CopyPayload(dst)
	}
	ntcopy.Copy(dst, p.Payload)
	return p.CheckICRC()
}
