package device

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/stamp"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/transport"
	"github.com/goroce/goroce/internal/wire"
)

// A worker's turn: a goroutine takes the worker (its own, routineWork, or
// one that finds it idle: tryInline), handles events (packets, kicks,
// calls, the timer), runs the QPs they made dirty (runDirty), writes what
// they queued on the send schedule (txsched.go), sets the timer and lets
// the worker go (endTurn).

type evKind uint8

const (
	evPackets evKind = iota // a batch of received packets
	evKick                  // a QP has work posted
	evCall                  // run a function on the worker
)

type event struct {
	kind  evKind
	batch *rxBatch
	qp    *QP
	fn    func()
	done  chan struct{}
}

// worker runs the QPs hashed to it. It implements transport.Env and
// transport.Clock.
type worker struct {
	e      *Engine
	ch     chan event
	quit   chan struct{}
	exited chan struct{}
	timer  *time.Timer

	// mu is held by whoever runs the worker's QPs: the worker goroutine,
	// or a goroutine that runs them inline (tryInline). pending counts
	// events sent to ch and not yet handled.
	mu      sync.Mutex
	pending atomic.Int64
	stopped bool // under mu: the worker has quit

	// heldAt is when the ACKs a busy poller's turn held back in tx are
	// due (txSchedule.holdAcks), a monotime.Time; zero: none are held.
	heldAt atomic.Int64

	// Owned by the holder of mu.
	qps        map[uint32]*QP
	dirty      []*QP // QPs to run Progress on, each once (QP.dirty)
	dirtySpare []*QP // the other dirty list, reused
	tx         []link.Packet
	bufs       [][]byte // buffers of written packets, for Buffer (keepBufs)
	pkt        wire.Packet
	timers     timerHeap // QPs with a deadline, earliest first
	timerSet   timerSet
	sched      txSchedule
	now        monotime.Time     // the step's time (clock); zero: not read yet
	budget     *transport.Budget // the PSNs its RC QPs may have in flight together

	// Received packets not yet added to the device's counters (countRx),
	// and the length of the one being handled, -1 when none is or it is
	// counted.
	rxPkts, rxBytes uint64
	rxCur           int
}

func newWorker(e *Engine, budget int) *worker {
	w := &worker{e: e, ch: make(chan event, 1024), quit: make(chan struct{}), exited: make(chan struct{}),
		qps: map[uint32]*QP{}, timer: time.NewTimer(time.Hour), rxCur: -1}
	w.timer.Stop()
	w.timerSet.reset = func(d time.Duration) { w.timer.Reset(d) }
	w.budget = transport.NewBudget(budget, func(t *transport.QP) {
		if qp := w.qps[t.QPN()]; qp != nil {
			w.markDirty(qp)
		}
	})
	return w
}

// routineWork is the worker's goroutine.
func (w *worker) routineWork() {
	defer close(w.exited)
	for {
		select {
		case ev := <-w.ch:
			w.mu.Lock()
			w.handleQueued(ev)
			for more := true; more; { // take what else is queued before writing
				select {
				case ev := <-w.ch:
					w.handleQueued(ev)
				default:
					more = false
				}
			}
		case <-w.timer.C:
			w.mu.Lock()
			w.timerSet.fired()
			now := w.clock()
			w.timers.expired(now, func(qp *QP) {
				if d := qp.t.Deadline(); !d.IsZero() && !now.Before(d) {
					qp.t.Timeout(w)
				}
				w.markDirty(qp) // Progress, then track files its next deadline
			})
		case <-w.quit:
			w.mu.Lock()
			w.stopped = true
			w.flush()
			w.mu.Unlock()
			return
		}
		w.endTurn(0)
	}
}

// endTurn ends a turn on the worker: Progress for the dirty QPs, write
// what they queued (or, in a busy poller's turn, polled being the time of
// its poll, hold plain ACKs back: txSchedule.holdAcks), set the timer, and
// release the worker.
func (w *worker) endTurn(polled monotime.Time) {
	w.runDirty()
	if stamp.Reached(stamp.Post) {
		stamp.Mark(stamp.Built)
	} else {
		stamp.Mark(stamp.Progress)
	}
	at := monotime.Time(w.heldAt.Load())
	if hold, due := w.sched.holdAcks(w.tx, polled, at); hold {
		if at.IsZero() {
			w.heldAt.Store(int64(due))
		}
	} else {
		w.flush()
	}
	w.timerSet.arm(w.timers.earliest(), w.clock)
	w.sched.endTurn()
	w.now = 0
	w.mu.Unlock()
	stamp.Mark(stamp.TurnEnd)
}

// clock returns the time of the worker's current step: read once, then the
// same until the step ends. A step ends where the worker writes (flush: a
// write can block on a full link, and deadlines armed after it with an
// older time would expire early), where it takes the next event or runs
// its dirty QPs (runDirty), and at the end of a turn. A step reads the
// clock only when something asks: the transport when it arms or checks a
// timer (Now), the end of a turn that sets the timer, a write of a
// request (flush). No step runs long without writing: a QP's Progress
// writes every link.MaxBatch packets at the most (Emit).
func (w *worker) clock() monotime.Time {
	if w.now.IsZero() {
		w.now = monotime.Now()
	}
	return w.now
}

// Now implements transport.Clock with the step's time (clock): the
// transport asks only to arm or check a timer, and a step whose packets
// arm none, as a ping-pong's WRITE and ACK do not, reads no clock.
func (w *worker) Now() monotime.Time { return w.clock() }

// send queues an event for the worker goroutine; false once it stopped.
func (w *worker) send(ev event) bool {
	w.pending.Add(1)
	select {
	case w.ch <- ev:
		return true
	case <-w.exited:
		w.pending.Add(-1)
		return false
	}
}

// tryInline takes the worker for the calling goroutine when it is idle:
// nobody runs it and no event is queued or being handled, so work done now
// keeps its order with all other work. The caller then ends with endTurn.
// This saves a goroutine wake-up per packet or post on an idle worker,
// which is most of a ping-pong's latency.
func (w *worker) tryInline() bool {
	if w.pending.Load() != 0 || !w.mu.TryLock() {
		return false
	}
	if w.pending.Load() != 0 || w.stopped {
		w.mu.Unlock()
		return false
	}
	return true
}

// handleQueued runs one event taken from ch.
func (w *worker) handleQueued(ev event) {
	defer w.pending.Add(-1)
	w.handle(ev)
	if ev.kind == evPackets {
		batchPool.Put(ev.batch) // emptied; a router that ran it inline keeps it instead (deliver)
	}
}

// handle runs one event on the worker, held by the caller.
func (w *worker) handle(ev event) {
	w.now = 0 // each event is a step (clock)
	switch ev.kind {
	case evPackets:
		w.receive(ev.batch)
	case evKick:
		ev.qp.kicked.Store(false)
		w.markDirty(ev.qp)
	case evCall:
		ev.fn()
		close(ev.done)
		if ev.qp != nil && ev.qp.live {
			w.markDirty(ev.qp) // the call may have changed its state and deadline
		}
	}
}

// receive hands a batch of packets to their QPs' transports.
func (w *worker) receive(bt *rxBatch) {
	stamp.Mark(stamp.Handle)
	for i := range bt.n {
		b := bt.bufs[i]
		bt.bufs[i] = nil
		qp := bt.qp[i]
		bt.qp[i] = nil
		if qp != nil && !qp.live {
			qp = nil // destroyed since the router found it
		}
		err := w.pkt.Parse(b)
		if bt.pend[i] {
			w.pkt.DeferICRC(bt.seed[i])
			bt.pend[i] = false
		}
		if err == nil && qp != nil {
			w.rxCur = len(b) // counted by a completion it brings (countRx)
			qp.t.ReceiveFrom(&w.pkt, bt.origin[i], w)
			w.markDirty(qp)
		}
		// A pending ICRC the transport did not need (the packet was
		// dropped unread) is checked for the counters.
		switch {
		case !w.pkt.CheckICRC():
			w.e.deferredICRC.Add(1)
		case err != nil || qp == nil:
			w.e.stats.Inc(stats.Malformed)
		default:
			w.takeCur()
		}
		w.rxCur = -1
		if !bt.lent[i] {
			putBuf(b)
		}
		bt.lent[i] = false
	}
	w.countRx()
	stamp.Mark(stamp.Received)
	bt.n = 0
}

// markDirty queues qp for Progress, once.
func (w *worker) markDirty(qp *QP) {
	if !qp.dirty {
		qp.dirty = true
		w.dirty = append(w.dirty, qp)
	}
}

// runDirty runs the dirty QPs until they have nothing more to send now.
// A QP that still has work after its turn goes to the back of the line,
// so one busy QP does not hold up the others.
func (w *worker) runDirty() {
	// A step of its own (clock): handling a batch before it can have
	// taken a while, and a deadline armed from its time (an RNR timer of
	// 10 µs) would come early.
	w.now = 0
	for len(w.dirty) > 0 {
		list := w.takeDirty()
		for i, qp := range list {
			qp.dirty = false
			qp.t.Progress(w) // a flush since the last read reads it again
			w.timers.track(qp, qp.t.Deadline())
			if qp.t.Busy() {
				w.flush()
				w.markDirty(qp)
				select { // let queued events in before continuing
				case ev := <-w.ch:
					w.handleQueued(ev)
				default:
					if w.pending.Load() > 0 {
						// An event was taken from ch and waits for the
						// worker (an inline holder has it): hand over,
						// keeping the rest of the turn queued.
						w.dirty = append(w.dirty, list[i+1:]...)
						w.doneDirty(list)
						return
					}
				}
			}
		}
		w.doneDirty(list)
	}
}

// takeDirty takes the dirty QPs for a run of runDirty; QPs made dirty
// meanwhile go to the spare list. The run owns the spare until it ends:
// a run inside it (Settle's call, taken from the channel by the run's
// loop) then starts a list of its own, so it never empties a list that
// the outer run fills.
func (w *worker) takeDirty() []*QP {
	list := w.dirty
	w.dirty, w.dirtySpare = w.dirtySpare[:0], nil
	return list
}

// doneDirty ends a run of the list takeDirty gave, keeping it, emptied,
// as the spare.
func (w *worker) doneDirty(list []*QP) {
	clear(list)
	w.dirtySpare = list[:0]
}

// Buffer implements transport.Env: a buffer the worker's last writes
// gave back, or one from the pool.
func (w *worker) Buffer() []byte {
	if n := len(w.bufs); n > 0 {
		b := w.bufs[n-1]
		w.bufs = w.bufs[:n-1]
		return b
	}
	return getBuf()
}

// keepBufs is how many written packets' buffers a worker keeps for its
// next ones (Buffer), instead of passing them through bufPool: a turn's
// worth, which its next turn takes back without the pool's pinning.
const keepBufs = link.MaxBatch

// Emit implements transport.Env: packets are written on the send
// schedule (txSchedule.emitWrites).
func (w *worker) Emit(p link.Packet) {
	w.tx = append(w.tx, p)
	if w.sched.emitWrites(len(w.tx)) {
		w.flush()
	}
}

// Push implements transport.Env: the queued packets are written now if
// the schedule says so (txSchedule.pushWrites).
func (w *worker) Push() {
	if w.sched.pushWrites(len(w.tx)) {
		w.flush()
	}
}

// Gathers implements transport.Env: every link takes a payload from where
// it lies (link.Packet.Payload). The same-host path copies it from the MR
// straight into the ring, the UDP socket path into the packet's buffer as
// it computes the ICRC (one pass instead of a copy and a CRC), and the
// in-memory and fault-stage links put the packet together first, as the
// transport would have.
func (w *worker) Gathers() bool { return true }

// Fatal implements transport.Env.
func (w *worker) Fatal(t *transport.QP, _ transport.WCStatus) {
	if qp := w.qps[t.QPN()]; qp != nil && qp.fatal != nil {
		qp.fatal()
	}
}

// flush writes the queued packets.
func (w *worker) flush() {
	if stamp.Reached(stamp.Post) {
		stamp.Mark(stamp.Flush)
	}
	if w.heldAt.Load() != 0 {
		w.heldAt.Store(0)
	}
	w.sched.order(w.tx)
	if hasRequest(w.tx) {
		w.sched.lastReq = w.clock()
	}
	for len(w.tx) > 0 {
		n, err := w.e.link.WriteBatch(w.tx)
		var bytes uint64
		for i := range n {
			bytes += uint64(len(w.tx[i].Buf) + len(w.tx[i].Payload))
		}
		w.e.stats.Add(stats.SentBytes, bytes)
		w.e.stats.Add(stats.SentPkts, uint64(n))
		w.sched.wrote(n)
		if err != nil && n == 0 {
			n = 1 // drop the packet the link refused; the transport retries
			w.e.stats.Inc(stats.SendErr)
		}
		for i := range n {
			if len(w.bufs) < keepBufs {
				w.bufs = append(w.bufs, w.tx[i].Buf[:0])
			} else {
				putBuf(w.tx[i].Buf)
			}
			w.tx[i] = link.Packet{}
		}
		w.tx = w.tx[:copy(w.tx, w.tx[n:])]
		w.now = 0 // the write ends the step (clock)
	}
}

// kick runs qp's requester now on this goroutine if the worker is idle,
// and queues a kick event otherwise.
func (w *worker) kick(qp *QP) {
	if w.tryInline() {
		stamp.Mark(stamp.Inline)
		qp.kicked.Store(false)
		w.markDirty(qp)
		w.sched.eager = w.e.eagerLink() // until endTurn
		w.endTurn(0)
		return
	}
	w.send(event{kind: evKick, qp: qp})
}

// call runs fn on the worker and waits for it; after the worker has
// stopped, fn runs on the caller.
func (w *worker) call(fn func()) { w.callOn(nil, fn) }

// callOn is call for work on one QP, which then gets a Progress turn.
func (w *worker) callOn(qp *QP, fn func()) {
	done := make(chan struct{})
	if !w.send(event{kind: evCall, qp: qp, fn: fn, done: done}) {
		fn()
		return
	}
	select {
	case <-done:
	case <-w.exited:
		select {
		case <-done:
		default:
			fn() // queued but never run
		}
	}
}

// forget drops a destroyed QP from the worker.
func (w *worker) forget(qp *QP) {
	delete(w.qps, qp.qpn)
	qp.live = false
	w.timers.remove(qp)
	if qp.dirty {
		qp.dirty = false
		for i, d := range w.dirty {
			if d == qp {
				w.dirty = append(w.dirty[:i], w.dirty[i+1:]...)
				break
			}
		}
	}
}
