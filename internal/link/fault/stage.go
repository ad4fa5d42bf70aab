package fault

// The fault stage of one link direction. The link's write path hands it
// each packet after filling the ICRC; the stage says what goes to the
// network now and keeps copies of what it holds:
//
//	WriteBatch (link write lock) ── admit ──▶ out: packets to send now ──▶ link sends, then recycle
//	                                   │
//	                                   └──▶ held: reorder list, delay heap (stage lock)
//	release goroutine (link write lock) ── due ──▶ out ──▶ link sends, then recycle
//	Close ── stop ──▶ ends the goroutine, discards and counts what is held
//
// The release goroutine exists only for configurations that hold packets.
// It sleeps until the earliest deadline (a reorder bound or a delay) or
// until admit holds something due earlier, then takes the link's write
// lock, as WriteBatch does, so that the stage sees packets in one order.
// Lock order: the link's write lock, then the stage's mu.

import (
	"container/heap"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/stats"
)

// pcgStream is the second word of the PCG state; Seed is the first.
const pcgStream = 0x676f726f6365 // "goroce"

// heldPkt is a packet the stage owns: one it holds, or one it corrupted
// and must not corrupt in the caller's buffer.
type heldPkt struct {
	buf      [link.MaxPacket]byte
	n        int
	dst, src netip.AddrPort
	ce, dup  bool

	after uint64        // reorder: leave when this many packets have been seen
	bound monotime.Time // reorder: leave by then anyway
	delay time.Duration // the delay to serve after the reorder step
	due   monotime.Time // delay: release then
	seq   uint64        // order of entry into the delay heap, for ties
}

// outPkt is one packet to send now. buf is either the caller's buffer or
// a held packet's; held, set on one entry per held packet, is returned to
// the pool by recycle once the link has sent the whole list.
type outPkt struct {
	buf      []byte
	dst, src netip.AddrPort
	ce       bool
	from     int // index in the caller's batch; -1 for a packet released from the holds
	held     *heldPkt
}

// stage is the fault injection of one link direction.
type stage struct {
	cfg    Config // validated; window and limit defaulted
	window int
	limit  int
	stats  *stats.Counters // what the stage did (stats.FaultSeen ...)

	// now and start are the clock and the time rule windows count from;
	// tests replace them before the first packet.
	now   func() monotime.Time
	start monotime.Time

	mu      sync.Mutex
	rng     *rand.Rand    // guarded by mu
	seen    uint64        // packets admitted; guarded by mu
	hits    []int         // matches per rule; guarded by mu
	reorder []*heldPkt    // waiting for later packets, in arrival order; guarded by mu
	delayed heldHeap      // waiting for their time; guarded by mu
	free    []*heldPkt    // guarded by mu
	seq     uint64        // guarded by mu
	wakeAt  monotime.Time // when the goroutine looks next; zero: when woken; guarded by mu
	stopped bool          // guarded by mu

	wake   chan struct{} // admit holds something due before wakeAt
	done   chan struct{} // closed by stop
	exited chan struct{} // closed by the goroutine
}

// newStage returns the stage for cfg, which must be valid. If cfg holds
// packets, the link must call startRelease once it is ready to send, and
// stop when it closes.
func newStage(cfg Config) *stage {
	cfg.Rules = append([]Rule(nil), cfg.Rules...)
	f := &stage{
		cfg:    cfg,
		window: cfg.ReorderWindow,
		limit:  cfg.Limit,
		now:    monotime.Now,
		stats:  stats.New(),
		rng:    rand.New(rand.NewPCG(cfg.Seed, pcgStream)),
		hits:   make([]int, len(cfg.Rules)),
	}
	if f.window == 0 {
		f.window = defaultReorderWindow
	}
	if f.limit == 0 {
		f.limit = defaultLimit
	}
	f.start = f.now()
	return f
}

// startRelease starts the release goroutine if the stage can hold packets.
// flush takes the link's write lock, sends what due returns, and returns
// the next deadline.
func (f *stage) startRelease(flush func() monotime.Time) {
	if !f.cfg.holds() {
		return
	}
	f.wake = make(chan struct{}, 1)
	f.done = make(chan struct{})
	f.exited = make(chan struct{})
	go f.run(flush)
}

// verdict is what the stage decided for one packet.
type verdict struct {
	drop, dup, ce, reorder bool
	bit                    int // the bit to flip; -1: none
	k                      int // reorder: later packets to wait for
	delay                  time.Duration
	rule                   bool
}

// decideLocked draws the random faults of packet p and applies the rules.
func (f *stage) decideLocked(p []byte, now monotime.Time) verdict {
	c := &f.cfg
	v := verdict{bit: -1, delay: c.Delay}
	// Always the same draws for a given configuration and packet length.
	if c.Drop > 0 {
		v.drop = f.rng.Float64() < c.Drop
	}
	if c.Duplicate > 0 {
		v.dup = f.rng.Float64() < c.Duplicate
	}
	if c.Reorder > 0 {
		v.reorder = f.rng.Float64() < c.Reorder
		v.k = 1 + f.rng.IntN(f.window)
	}
	if c.Corrupt > 0 {
		hit := f.rng.Float64() < c.Corrupt
		bit := coveredBit(f.rng.IntN(coveredBits(p)))
		if hit {
			v.bit = bit
		}
	}
	if c.Jitter > 0 {
		v.delay += time.Duration(f.rng.Int64N(int64(c.Jitter)))
	}
	if c.CEMark > 0 {
		v.ce = f.rng.Float64() < c.CEMark
	}
	if r := f.matchLocked(p, now); r != nil {
		v.rule = true
		switch r.Action {
		case ActDrop:
			v.drop = true
		case ActDup:
			v.dup = true
		case ActCorrupt:
			if v.bit < 0 {
				v.bit = f.ruleBit(p)
			}
		case ActDelay:
			v.delay += r.Delay
		case ActCE:
			v.ce = true
		}
	}
	return v
}

// ruleBit picks the bit a rule corrupts, from a hash of the seed and the
// packet's number rather than from the generator, so that rules do not
// disturb the random faults.
func (f *stage) ruleBit(p []byte) int {
	x := f.cfg.Seed + f.seen*0x9e3779b97f4a7c15 // splitmix64
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return coveredBit(int(x % uint64(coveredBits(p))))
}

// icrcMaskedByte is the BTH byte the ICRC leaves out (FECN, BECN and
// resv6a, which the network may change; IBA Annex A17.3.3): a flip there cannot
// be detected, so corruption spares it.
const icrcMaskedByte = 4

// coveredBits returns the number of bits of p the ICRC covers.
func coveredBits(p []byte) int { return (len(p) - 1) * 8 }

// coveredBit maps i in [0, coveredBits) to a bit number of the packet,
// skipping icrcMaskedByte.
func coveredBit(i int) int {
	if i >= icrcMaskedByte*8 {
		i += 8
	}
	return i
}

// matchLocked returns the first active rule that matches p and counts the
// match, or returns nil.
func (f *stage) matchLocked(p []byte, now monotime.Time) *Rule {
	if len(f.cfg.Rules) == 0 {
		return nil
	}
	t := now.Sub(f.start)
	for i := range f.cfg.Rules {
		r := &f.cfg.Rules[i]
		if t < r.From || r.For > 0 && t >= r.From+r.For || r.Count > 0 && f.hits[i] >= r.Count || !r.matches(p) {
			continue
		}
		f.hits[i]++
		return r
	}
	return nil
}

// admit runs packet p, the caller's packet number from with its ICRC
// filled, through the stage, and appends to out what is to be sent now, in
// order: p (unless dropped or held), then held packets that p releases.
// The caller holds the link's write lock.
func (f *stage) admit(p []byte, dst, src netip.AddrPort, from int, out []outPkt) []outPkt {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen++
	f.stats.Inc(stats.FaultSeen)
	v := f.decideLocked(p, now)
	if v.rule {
		f.stats.Inc(stats.FaultRuleHits)
	}
	if v.drop {
		f.count(stats.FaultDropChance, 1)
		return f.releaseLocked(now, out)
	}
	hold := v.reorder || v.delay > 0
	if hold && (f.stopped || len(f.reorder)+f.delayed.Len() >= f.limit) {
		if f.stopped {
			f.count(stats.FaultDiscarded, 1)
		} else {
			f.count(stats.FaultOverflow, 1)
		}
		return f.releaseLocked(now, out)
	}
	copies := uint64(1)
	if v.dup {
		copies = 2
		f.stats.Inc(stats.FaultDuplicated)
	}
	if v.bit >= 0 {
		f.stats.Add(stats.FaultCorrupted, copies)
	}
	if v.ce {
		f.stats.Add(stats.FaultCEMarked, copies)
	}
	switch {
	case hold || v.bit >= 0:
		h := f.getLocked()
		h.n = copy(h.buf[:], p)
		h.dst, h.src, h.ce, h.dup = dst, src, v.ce, v.dup
		if v.bit >= 0 {
			h.buf[v.bit/8] ^= 1 << (v.bit % 8)
		}
		switch {
		case v.reorder:
			f.stats.Inc(stats.FaultReordered)
			if v.delay > 0 {
				f.stats.Inc(stats.FaultDelayed)
			}
			h.after, h.bound, h.delay = f.seen+uint64(v.k), now.Add(reorderBound), v.delay
			f.reorder = append(f.reorder, h)
		case v.delay > 0:
			f.stats.Inc(stats.FaultDelayed)
			f.delayLocked(h, now.Add(v.delay))
		default: // only corrupted: it goes now, from the stage's copy
			out = h.appendOut(out, from)
		}
	default:
		o := outPkt{buf: p, dst: dst, src: src, ce: v.ce, from: from}
		out = append(out, o)
		if v.dup {
			out = append(out, o)
		}
	}
	out = f.releaseLocked(now, out)
	if next := f.nextLocked(); !next.IsZero() && (f.wakeAt.IsZero() || next.Before(f.wakeAt)) {
		f.wakeAt = next
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
	return out
}

// appendOut appends the packet's copies to out; the last one carries h,
// to be recycled once everything is sent.
func (h *heldPkt) appendOut(out []outPkt, from int) []outPkt {
	o := outPkt{buf: h.buf[:h.n], dst: h.dst, src: h.src, ce: h.ce, from: from}
	if h.dup {
		out = append(out, o)
	}
	o.held = h
	return append(out, o)
}

func (f *stage) getLocked() *heldPkt {
	if n := len(f.free); n > 0 {
		h := f.free[n-1]
		f.free[n-1] = nil
		f.free = f.free[:n-1]
		return h
	}
	return new(heldPkt)
}

func (f *stage) delayLocked(h *heldPkt, due monotime.Time) {
	h.due, h.seq = due, f.seq
	f.seq++
	heap.Push(&f.delayed, h)
}

// releaseLocked appends to out the held packets that may go at now:
// reordered packets whose later packets have passed or whose bound has
// come (into the delay heap instead if they have a delay to serve), then
// delayed packets that are due.
func (f *stage) releaseLocked(now monotime.Time, out []outPkt) []outPkt {
	if len(f.reorder) > 0 {
		k := 0
		for _, h := range f.reorder {
			switch {
			case f.seen < h.after && now.Before(h.bound):
				f.reorder[k] = h
				k++
			case h.delay > 0:
				f.delayLocked(h, now.Add(h.delay))
			default:
				out = h.appendOut(out, -1)
			}
		}
		clear(f.reorder[k:])
		f.reorder = f.reorder[:k]
	}
	for f.delayed.Len() > 0 && !now.Before(f.delayed[0].due) {
		out = heap.Pop(&f.delayed).(*heldPkt).appendOut(out, -1)
	}
	return out
}

// nextLocked returns the earliest deadline of the held packets, or zero.
// Reorder bounds grow in arrival order, so the first is the earliest.
func (f *stage) nextLocked() monotime.Time {
	var next monotime.Time
	if len(f.reorder) > 0 {
		next = f.reorder[0].bound
	}
	if f.delayed.Len() > 0 && (next.IsZero() || f.delayed[0].due.Before(next)) {
		next = f.delayed[0].due
	}
	return next
}

// due appends to out the held packets that may go now, for the release
// goroutine, and returns the next deadline (zero: none). The caller holds
// the link's write lock.
func (f *stage) due(out []outPkt) ([]outPkt, monotime.Time) {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	out = f.releaseLocked(now, out)
	f.wakeAt = f.nextLocked()
	return out, f.wakeAt
}

// recycle returns the held packets of out to the pool and clears out,
// after the link sent out[:sent]. Released packets in out[sent:] count as
// discarded; the caller's own packets there were not sent, and the
// caller learns so from WriteBatch.
func (f *stage) recycle(out []outPkt, sent int) {
	var lost uint64
	for i := sent; i < len(out); i++ {
		if out[i].from < 0 {
			lost++
		}
	}
	if lost > 0 {
		f.count(stats.FaultDiscarded, lost)
	}
	f.mu.Lock()
	for i := range out {
		if h := out[i].held; h != nil && !f.stopped {
			f.free = append(f.free, h)
		}
		out[i] = outPkt{}
	}
	f.mu.Unlock()
}

// run is the release goroutine: it sleeps until the next deadline or a
// wake from admit, then flushes.
func (f *stage) run(flush func() monotime.Time) {
	defer close(f.exited)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-f.done:
			timer.Stop()
			return
		case <-f.wake:
		case <-timer.C:
		}
		if next := flush(); next.IsZero() {
			timer.Stop()
		} else {
			timer.Reset(next.Sub(f.now()))
		}
	}
}

// stop ends the release goroutine, waits for it, and discards what is
// held. The link must already be closed, so that a flush blocked on the
// network returns. Later calls do nothing.
func (f *stage) stop() {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return
	}
	f.stopped = true
	f.mu.Unlock()
	if f.done != nil {
		close(f.done)
		<-f.exited
	}
	f.mu.Lock()
	var lost uint64
	for _, h := range f.reorder {
		lost += h.copies()
	}
	for _, h := range f.delayed {
		lost += h.copies()
	}
	f.reorder, f.delayed, f.free = nil, nil, nil
	f.mu.Unlock()
	f.count(stats.FaultDiscarded, lost)
}

// count adds n to a counter of packets that never reach the network, and
// to their sum, stats.FaultDropped.
func (f *stage) count(c stats.Counter, n uint64) {
	f.stats.Add(c, n)
	f.stats.Add(stats.FaultDropped, n)
}

func (h *heldPkt) copies() uint64 {
	if h.dup {
		return 2
	}
	return 1
}

// heldHeap orders delayed packets by release time, then by entry.
type heldHeap []*heldPkt

func (q heldHeap) Len() int { return len(q) }
func (q heldHeap) Less(i, j int) bool {
	if q[i].due != q[j].due {
		return q[i].due.Before(q[j].due)
	}
	return q[i].seq < q[j].seq
}
func (q heldHeap) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *heldHeap) Push(x any)   { *q = append(*q, x.(*heldPkt)) }
func (q *heldHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return h
}
