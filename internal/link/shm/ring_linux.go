//go:build linux

package shm

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/prefetch"
)

const (
	shmSlots    = SameHostSlots
	shmSlotHdr  = 8 // length (4), source port (2), reserved (2)
	shmSlotSize = (shmSlotHdr + link.MaxPacket + 63) &^ 63
	shmHdrSize  = 4096
	shmRingSize = shmHdrSize + shmSlots*shmSlotSize

	// Header fields, each on its own cache line.
	shmOffTail    = 0   // producer: slots published (uint64)
	shmOffHead    = 64  // consumer: slots consumed (uint64)
	shmOffWaiting = 128 // consumer: 1 while it is about to wait for the doorbell (uint32)
	shmOffClosed  = 192 // consumer: 1 once it reads no more (uint32)

	shmRetry = time.Second // how long a peer without a same-host socket is left to UDP

	// shmSocketPolls: with same-host channels open, a busy poller reads
	// the socket on one poll in this many (readLocked;
	// docs/design/tuning.md#socket-polls).
	shmSocketPolls = 8

	// shmPrefetchAhead and shmPrefetchLines: the producer, having
	// written a slot, asks the CPU for the slot shmPrefetchAhead further
	// on, to be written; the consumer, reading one, for the slot as far
	// on, if it is published. The prefetch covers as many cache lines as
	// the packet in hand takes (the next ones are likely its size), at
	// most shmPrefetchLines: past that, a copy is long enough for the
	// CPU's own prefetcher, unless the two CPUs are far apart, where the
	// producer asks for whole slots (slotWidth). A slot's lines move
	// between the cores every time around the ring (the consumer read
	// them last, the producer wrote them last), and without the hint
	// each store of a small packet waits for one
	// (docs/design/tuning.md#ring-prefetch).
	shmPrefetchAhead = 4
	shmPrefetchLines = 8
)

// SameHostSlots is how many packets a same-host ring holds: a power of
// two, and more than a device's RC QPs have in flight together (the
// engine's send budget, internal/device: TestRingHoldsBudget), so that a
// live consumer's ring never overflows while the budget holds.
const SameHostSlots = 2048

// prefetchSlot asks the CPU for the lines that a packet of size bytes
// takes in slot, at most limit, to be written or read.
func prefetchSlot(slot []byte, size int, write bool, limit int) {
	lines := min((shmSlotHdr+size+prefetch.LineSize-1)/prefetch.LineSize, limit)
	if write {
		prefetch.Write(unsafe.Pointer(&slot[0]), lines)
	} else {
		prefetch.Read(unsafe.Pointer(&slot[0]), lines)
	}
}

// A dialing sender writes a hello, with the memfd and the eventfd as
// rights: magic, version, ring geometry (slots, slot size) and its IP
// address, which the receiver's packets from this ring report as their
// source.
const (
	shmMagic    = "goroceSH"
	shmHelloLen = 8 + 4 + 4 + 4 + 16
)

// shmRing is one ring: shared memory mapped from a memfd, or (in tests)
// ordinary memory.
type shmRing struct {
	mem    []byte
	mapped bool
}

func (r *shmRing) u64(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&r.mem[off])) }

func (r *shmRing) u32(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&r.mem[off])) }

func (r *shmRing) slot(i uint64) []byte {
	off := shmHdrSize + int(i%shmSlots)*shmSlotSize
	return r.mem[off : off+shmSlotSize : off+shmSlotSize]
}

func (r *shmRing) unmap() {
	if r.mapped {
		unix.Munmap(r.mem)
	}
}
