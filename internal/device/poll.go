package device

import (
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/stamp"
)

// Busy polling.
//
// By default the reader waits in the Go netpoller for packets, and an
// application that waits for a completion blocks on a channel: a message
// that ends a wait costs two goroutine wake-ups, which are most of a small
// message's latency. A goroutine that busy-polls instead calls Progress
// between its checks of a CQ or of an MR's remote writes: Progress reads
// what has arrived on the link without waiting and runs the transport on
// it right there, so the completion appears on the polling goroutine with
// no wake-up at all.
//
// While a goroutine polls, the reader stays off the link (parkWhilePolled):
// waiting in ReadBatch it would be woken for each packet the poller is about
// to take, a goroutine wake-up per packet on the other CPU. It takes the
// link back pollGrace after the last Progress call, or at once when polling
// ends (EndPoll, BusyPoll giving up).
//
//	poller ── Progress ── first call: handOff ──▶ link.Interrupt, wait for "parked"
//	       │                                         ▲
//	       └─ PollBatch / ReadLent(no wait) ─▶ route │
//	reader ── parkWhilePolled: "parked", then wait for EndPoll or pollGrace

// pollGrace is how long after the last Progress call the reader stays
// parked, unless polling ends explicitly (EndPoll).
const pollGrace = time.Millisecond

// linkCountsEvery is how often at most a busy poll copies the link's
// counters (ICRC errors, socket drops, ...) into the device's published
// ones; the reader copies them after every batch, and polling that ends
// (EndPoll, or the reader taking the link back) once more. Copying them on
// every poll would sit on the way of each polled message to the
// application. What the published counters show lags a poll's by at most
// this much; Device.Counters copies them itself.
const linkCountsEvery = time.Millisecond

// poller is the engine's busy-polling state.
type poller struct {
	// lastPoll is when a goroutine last polled, a monotime.Time; zero:
	// nobody polls.
	lastPoll atomic.Int64
	wake     chan struct{} // wakes the parked reader when polling ends
	parked   chan struct{} // the reader's word that it has left the link (handOff)

	mu        sync.Mutex
	r         *router       // the pollers' router; guarded by mu
	countedAt monotime.Time // when a poll last copied the link's counters; guarded by mu

	// graceWaits counts the hand-offs that waited out pollGrace: the
	// reader did not park (it was routing a batch that long, or took the
	// poll for over).
	graceWaits atomic.Int64
}

func (p *poller) init() {
	p.wake = make(chan struct{}, 1)
	p.parked = make(chan struct{}, 1)
}

// Progress reads what has arrived on the link, without waiting, and runs
// it on the calling goroutine where the workers are idle. It returns the
// packets read: 0 when none had arrived or another goroutine is reading.
func (e *Engine) Progress() int { return e.pollOnce(monotime.Now()) }

// pollOnce is Progress at time now.
func (e *Engine) pollOnce(now monotime.Time) int {
	p := &e.poll
	if p.lastPoll.Swap(int64(now)) == 0 {
		e.handOff()
	}
	if !p.mu.TryLock() {
		return 0
	}
	defer p.mu.Unlock()
	if p.r == nil {
		p.r = e.newRouter(e.link, netip.Addr{})
		p.r.poller = true
	}
	r := p.r
	r.fill()
	n, err := r.read(false)
	if err != nil || n == 0 {
		r.used = 1 // a read that finds nothing touches at most the first slot
		if err != nil {
			r.used = len(r.pkts)
		}
		e.flushHeld(now)
		return 0
	}
	if now.Sub(p.countedAt) >= linkCountsEvery {
		e.updateLinkCounters()
		p.countedAt = now
	}
	r.polled = now
	r.routeAndReturn(n)
	if p.lastPoll.Load() == 0 {
		// The reader took the link back while this turn ran (the poller
		// was held up for pollGrace between two calls) and has already
		// flushed what was held then; what this turn held would wait for
		// the next packet or a retransmission. Either the reader's
		// flushHeld sees this turn's heldAt, or this load sees its reset,
		// so one of the two writes it.
		e.flushHeld(0)
	}
	return n
}

// queued reports whether a worker has events queued.
func (e *Engine) queued() bool {
	for _, w := range e.workers {
		if w.pending.Load() != 0 {
			return true
		}
	}
	return false
}

// handOff gets the reader out of its wait, in which it holds the link, and
// into parkWhilePolled, when polling starts. The reader waits in the Go
// netpoller, and a wait there ends only when the scheduler polls the
// network, which it does when a P finds nothing else to run: a poller that
// spun on the only P (the bandwidth tools run on one) would never let it,
// and would find the link taken for as long as it spun. So the poller
// interrupts the wait and blocks until the reader says it has parked:
// blocking lets the scheduler poll, which wakes the reader on the same
// thread. A reader busy routing a batch parks when it is done; the wait is
// bounded by pollGrace all the same.
func (e *Engine) handOff() {
	p := &e.poll
	select {
	case <-p.parked: // a word from an earlier time polling started
	default:
	}
	e.link.Interrupt()
	t := time.NewTimer(pollGrace)
	select {
	case <-p.parked:
	case <-e.readerDone:
	case <-t.C:
		p.graceWaits.Add(1)
	}
	t.Stop()
}

// flushHeld writes the ACKs held back by pollers' turns that are due at
// now (all of them, with the zero now) on workers that are idle; a busy
// worker writes them at the end of its turn.
func (e *Engine) flushHeld(now monotime.Time) {
	for _, w := range e.workers {
		if at := monotime.Time(w.heldAt.Load()); !at.IsZero() && (now.IsZero() || !now.Before(at)) && w.tryInline() {
			w.endTurn(0)
		}
	}
}

// EndPoll gives the link back to the reader at once.
func (e *Engine) EndPoll() {
	e.flushHeld(0)
	e.updateLinkCounters()
	e.poll.lastPoll.Store(0)
	select {
	case e.poll.wake <- struct{}{}:
	default:
	}
}

// takeBack ends polling after the poller that polled at last has gone
// quiet for pollGrace, unless it, or another, polled again since: a
// poller that comes back has skipped its hand-off (its lastPoll was not
// zero), and a reader that took the link then would hold it, waiting in
// the netpoller, for as long as that poller polled.
func (p *poller) takeBack(last monotime.Time) bool {
	return p.lastPoll.CompareAndSwap(int64(last), 0)
}

// parkWhilePolled keeps the reader off the link while a goroutine
// busy-polls the device. It returns false when the engine stops.
func (e *Engine) parkWhilePolled() bool {
	p := &e.poll
	var t *time.Timer
	for {
		last := monotime.Time(p.lastPoll.Load())
		if last.IsZero() {
			return true
		}
		left := pollGrace - monotime.Since(last)
		if left <= 0 {
			if !p.takeBack(last) {
				continue
			}
			e.flushHeld(0)
			e.updateLinkCounters()
			return true
		}
		if t == nil {
			t = time.NewTimer(left)
			defer t.Stop()
		} else {
			t.Reset(left)
		}
		select {
		case p.parked <- struct{}{}: // for handOff
		default:
		}
		select {
		case <-p.wake:
		case <-t.C:
		case <-e.closing:
			return false
		}
	}
}

// BusyPoll calls done until it returns true, driving the device with
// Progress between calls, for at most spin. It reports whether done
// returned true; when it did not, polling has ended (EndPoll). After
// yieldAfter without a result the poller also offers its CPU to other
// threads between its polls (yieldThread), and a poller whose yield lets
// another thread run while another goroutine of the process polls too
// moves its thread to another CPU (unstack).
func (e *Engine) BusyPoll(spin time.Duration, done func() bool) bool {
	if done() {
		stamp.Mark(stamp.Done)
		return true
	}
	start := monotime.Now()
	end := start.Add(spin)
	pollers.Add(1)
	defer pollers.Add(-1)
	sched := start // when the poller last let other goroutines run
	for now := start; ; now = monotime.Now() {
		if e.queued() {
			// A worker has events queued (the kicks of WRs the caller
			// just posted): let it write them before this poller reads
			// the link, which would find nothing yet, at the cost of a
			// system call ahead of every burst. The worker's turn can
			// take milliseconds, so the clock is read again: the poll is
			// stamped with now, and a reader that found the stamp older
			// than pollGrace would take the poller for gone and read
			// instead of parking, leaving handOff to wait out pollGrace.
			runtime.Gosched()
			now = monotime.Now()
		}
		if e.pollOnce(now) == 0 {
			// Let the goroutines that share this P run (timers, a
			// goroutine the application runs beside the poller), every
			// schedEvery.
			if now.Sub(sched) >= schedEvery {
				runtime.Gosched()
				sched = now
			}
			if now.Sub(start) > yieldAfter {
				t := monotime.Now()
				yieldThread()
				if monotime.Since(t) > sharedYield && pollers.Load() > 1 {
					unstack(t)
				}
			}
		}
		if !now.Before(end) {
			e.EndPoll()
			return done()
		}
		// done before the clock: a poll that brought the message goes
		// straight back to the application.
		if done() {
			stamp.Mark(stamp.Done)
			return true
		}
	}
}

// yieldAfter is how long BusyPoll spins before it offers the thread's CPU
// to others between its polls. Linux wakes a thread on the CPU of the
// thread that woke it when that CPU runs nothing else (a wake-up from a
// loopback send counts as one the sender is about to sleep after), unless
// the thread's previous CPU is idle; on a virtual machine an idle vCPU
// that halted looks preempted, not idle. So a poller's send can pull the
// peer's thread onto the poller's own CPU, where it waits for as long as
// the poller spins: the answer the poller waits for is stuck behind it.
// The wait is counted from the start of BusyPoll, not from the last poll
// that read something (docs/design/tuning.md#yield-after).
const yieldAfter = 50 * time.Microsecond

// schedEvery is how often at most a poller whose polls find nothing lets
// the goroutines that share its P run (runtime.Gosched): a Gosched after
// every empty poll would lengthen the cycle of the poll that finds a
// message arriving (BenchmarkBusyPollEmpty). A worker with queued events
// is let run at once all the same (queued).
const schedEvery = 4 * time.Microsecond

// sharedYield is how long a yield (yieldThread) must take for the poller
// to conclude that another thread ran on its CPU meanwhile: a yield that
// finds nobody else runnable returns in a microsecond or two.
const sharedYield = 10 * time.Microsecond

// unstackEvery is how often at most the process moves a poller's thread
// (unstack).
const unstackEvery = 5 * time.Millisecond

var (
	pollers     atomic.Int32 // goroutines of this process in BusyPoll
	lastUnstack atomic.Int64 // the monotime.Time of the last move tried
	unstacked   atomic.Int64 // threads moved, for tests
)

// unstack moves the calling poller's thread to another CPU (moveThread),
// when another goroutine of this process polls too and the last move was
// unstackEvery ago or longer. Two polling threads of one process can end
// up on one CPU while another CPU idles: a wake-up during a connection's
// setup puts the woken thread on its waker's CPU, and the kernel's load
// balancer leaves alone threads that ran within the last half
// millisecond, which two pollers always have. A yield does not make the
// kernel place a thread anew; a change of its CPU affinity does. Only
// pollers of one process are moved: between two processes, the thread
// that ran may be anybody's (docs/design/tuning.md#unstack).
func unstack(now monotime.Time) {
	last := lastUnstack.Load()
	if now.Sub(monotime.Time(last)) < unstackEvery || !lastUnstack.CompareAndSwap(last, int64(now)) {
		return
	}
	if moveThread() {
		unstacked.Add(1)
	}
}

// HoldsAcks reports whether a poller's turn holds ACKs back on one of the
// workers (txSchedule.holdAcks).
func (e *Engine) HoldsAcks() bool {
	for _, w := range e.workers {
		if w.heldAt.Load() != 0 {
			return true
		}
	}
	return false
}
