package verbs

import (
	"container/heap"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/stamp"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/transport"
	"github.com/goroce/goroce/internal/wire"
)

// The device's goroutines:
//
//	reader     link.ReadBatch → route each packet by destination QPN to the
//	           worker that owns the QP (QPN modulo the number of workers)
//	group ×M   one reader per multicast group the device's QPs are attached
//	           to (mcast.go): each packet to QPN 0xFFFFFF is copied to every
//	           attached QP's worker; it ends when the group's link closes
//	worker ×N  owns its QPs' transport state: runs Receive, Progress and
//	           Timeout, and writes what they emit with link.WriteBatch
//
// Users' goroutines post work requests into locked queues and kick the
// worker; modify and destroy run as calls on the worker. Device.Close
// closes the link, which ends the reader, and stops the workers; nothing
// waits for a peer.

// pktBuf is a packet buffer; buffers circulate through bufPool between the
// reader, the workers and the link, so packets allocate nothing.
type pktBuf [link.MaxPacket]byte

var bufPool = sync.Pool{New: func() any { return new(pktBuf) }}

func getBuf() []byte  { return bufPool.Get().(*pktBuf)[:0] }
func putBuf(b []byte) { bufPool.Put((*pktBuf)(b[:link.MaxPacket])) }
func fullBuf() []byte { return bufPool.Get().(*pktBuf)[:] }

// rxBatch carries received packets from the reader to one worker.
type rxBatch struct {
	bufs   [link.MaxBatch][]byte
	lent   [link.MaxBatch]bool // bufs[i] is the link's memory (link.Lender), not a pool buffer
	qp     [link.MaxBatch]*QP  // the QP each packet is for (multicast: one copy per QP)
	origin [link.MaxBatch]transport.Origin
	seed   [link.MaxBatch]uint32 // with pending: the ICRC's seed (link.Packet.ICRCSeed)
	pend   [link.MaxBatch]bool   // bufs[i]'s ICRC is still to be checked (link.ICRCDeferrer)
	n      int
}

var batchPool = sync.Pool{New: func() any { return new(rxBatch) }}

type evKind uint8

const (
	evPackets evKind = iota
	evKick
	evCall
)

type event struct {
	kind  evKind
	batch *rxBatch
	qp    *QP
	fn    func()
	done  chan struct{}
}

type dispatcher struct {
	dev        *Device
	workers    []*worker
	readerDone chan struct{}
	closing    chan struct{} // closed by stop: a parked reader ends

	// Busy polling (Device.Progress): lastPoll is when a goroutine last
	// polled (nanotime; 0: nobody polls), pollWake wakes the parked
	// reader when polling ends, parked is the reader's word that it has
	// left the socket (handOff), poll is the pollers' routing state.
	lastPoll atomic.Int64
	pollWake chan struct{}
	parked   chan struct{}

	// graceExpired, when set (tests), runs when parkWhilePolled finds
	// the poller's grace over, before it gives the socket back.
	graceExpired func()
	pollMu       sync.Mutex
	poll         *router // guarded by pollMu
	countedAt    int64   // when a poll last copied the link's counters; guarded by pollMu

	// graceWaits counts the hand-offs that waited out pollGrace: the
	// reader did not park (it was routing a batch that long, or took the
	// poll for over).
	graceWaits atomic.Int64
}

func newDispatcher(d *Device, n int) *dispatcher {
	if n <= 0 {
		n = min(runtime.GOMAXPROCS(0), 4)
	}
	p := &dispatcher{dev: d, readerDone: make(chan struct{}), closing: make(chan struct{}),
		pollWake: make(chan struct{}, 1), parked: make(chan struct{}, 1)}
	for range n {
		w := &worker{dev: d, ch: make(chan event, 1024), quit: make(chan struct{}), exited: make(chan struct{}),
			qps: map[uint32]*QP{}, timer: time.NewTimer(time.Hour), rxCur: -1}
		w.timer.Stop()
		w.budget = transport.NewBudget(sendBudget/n, func(t *transport.QP) {
			if qp := w.qps[t.QPN()]; qp != nil {
				w.markDirty(qp)
			}
		})
		p.workers = append(p.workers, w)
		go w.run()
	}
	go p.read()
	return p
}

func (p *dispatcher) workerFor(qpn uint32) *worker { return p.workers[qpn%uint32(len(p.workers))] }

// stop ends the reader, which ends when the link closes (or, parked, at
// once), and the workers.
func (p *dispatcher) stop() {
	close(p.closing)
	<-p.readerDone
	for _, w := range p.workers {
		close(w.quit)
		<-w.exited
	}
}

// read is the reader goroutine of the device's own link.
func (p *dispatcher) read() {
	defer close(p.readerDone)
	p.readLink(p.dev.link, netip.Addr{})
}

// readLink reads l until it closes and routes its packets to the workers.
// group is the multicast group l receives for, or the zero Addr for the
// device's unicast link, whose reader steps aside while the device is
// busy-polled.
func (p *dispatcher) readLink(l link.Link, group netip.Addr) {
	r := p.newRouter(l, group)
	defer r.release()
	for {
		if !group.IsValid() && !p.parkWhilePolled() {
			return
		}
		r.fill()
		n, err := r.read(true)
		if err != nil {
			r.used = len(r.pkts)
			return
		}
		if n == 0 { // interrupted: a poller took over
			continue
		}
		if !group.IsValid() {
			p.dev.updateLinkCounters()
		}
		if !r.routeAndReturn(n) {
			return
		}
	}
}

// router routes the packets one goroutine reads to the workers.
type router struct {
	p       *dispatcher
	link    link.Link
	lender  link.Lender // link, if it lends packets; else nil
	pkts    [link.MaxBatch]link.Packet
	batches []*rxBatch // per worker, the batch being filled
	group   netip.Addr // the multicast group read, or the zero Addr
	dst     netip.Addr // the packets' destination address
	used    int        // pkts[:used] may need a buffer or their full length back
	spare   *rxBatch   // a batch run inline, kept for the next (no trip to batchPool)
	polled  int64      // a poller's router: the nanotime of the poll being routed; 0 in any other

	// A busy poller's router runs every batch on its own goroutine when
	// the worker is idle, and leaves the ACKs that come of it queued for
	// a moment (worker.finishTurn); the reader runs only small batches.
	poller bool
}

func (p *dispatcher) newRouter(l link.Link, group netip.Addr) *router {
	r := &router{p: p, link: l, batches: make([]*rxBatch, len(p.workers)), group: group, dst: p.dev.cfg.Addr, used: link.MaxBatch}
	if group.IsValid() {
		r.dst = group
	}
	r.lender, _ = l.(link.Lender)
	return r
}

// read reads a batch from the link, borrowing the packets if it lends
// them.
func (r *router) read(wait bool) (int, error) {
	switch {
	case r.lender != nil:
		return r.lender.ReadLent(r.pkts[:], wait)
	case wait:
		return r.link.ReadBatch(r.pkts[:])
	default:
		return r.link.PollBatch(r.pkts[:])
	}
}

// routeAndReturn is route for n packets read, after which what the link
// lent goes back to it.
func (r *router) routeAndReturn(n int) bool {
	ok := r.route(n)
	if r.lender != nil {
		r.lender.ReturnLent()
	}
	return ok
}

// fill gives every packet slot a full buffer to read into. Only the slots
// the last read touched need it: a read of n packets reslices at most the
// first n+1 (see link.Link.ReadBatch) and route takes buffers from the
// first n.
func (r *router) fill() {
	for i := range r.pkts[:r.used] {
		if cap(r.pkts[i].Buf) == 0 {
			r.pkts[i].Buf = fullBuf()
		}
		r.pkts[i].Buf = r.pkts[i].Buf[:link.MaxPacket]
	}
	r.used = 0
}

// release returns the slots' buffers to the pool.
func (r *router) release() {
	for i := range r.pkts {
		if cap(r.pkts[i].Buf) != 0 {
			putBuf(r.pkts[i].Buf)
			r.pkts[i].Buf = nil
		}
	}
}

// route hands pkts[:n] to their QPs' workers. It returns false once the
// workers have stopped.
func (r *router) route(n int) bool {
	stamp.Mark(stamp.Routed)
	p := r.p
	r.used = min(n+1, len(r.pkts))
	for i := range n {
		b, lent := r.pkts[i].Lent, true
		if b == nil {
			b, lent = r.pkts[i].Buf, false
		}
		qpn := wire.BTH(b).DestQP()
		if qpn == transport.MulticastQPN {
			// IBA multicast: a copy for every QP attached to the group.
			// Only group links carry them (the unicast socket never
			// sees a group address).
			if r.group.IsValid() {
				if !r.intact(&r.pkts[i]) {
					continue
				}
				for _, qp := range p.dev.mcastQPs(r.group) {
					c := getBuf()[:len(b)]
					copy(c, b)
					if !r.queue(qp, &link.Packet{Peer: r.pkts[i].Peer}, c, false) {
						return false
					}
				}
			} else {
				p.dev.stats.Inc(stats.Malformed)
			}
			continue // the buffer is reused
		}
		qp := p.dev.qpTable.load(qpn)
		if qp == nil || r.group.IsValid() {
			if r.intact(&r.pkts[i]) {
				p.dev.stats.Inc(stats.Malformed) // no such QP: dropped (the buffer is reused)
			}
			continue
		}
		if !r.queue(qp, &r.pkts[i], b, lent) {
			return false
		}
		if !lent {
			r.pkts[i].Buf = nil // taken
		}
	}
	for wi, bt := range r.batches {
		if bt == nil {
			continue
		}
		r.batches[wi] = nil
		if !r.deliver(p.workers[wi], bt) {
			return false
		}
	}
	return true
}

// intact checks the ICRC of a packet dropped before it reaches a QP, if
// the link left it pending: a damaged one is counted as such (not as
// malformed). It reports whether the ICRC is right.
func (r *router) intact(p *link.Packet) bool {
	if !p.ICRCPending || p.Lent == nil || wire.CheckDeferredICRC(p.Lent, p.ICRCSeed) {
		return true
	}
	r.p.dev.icrc.CountICRCError()
	return false
}

// queue adds packet b, read as p, for qp to its worker's batch, handing
// the batch over when it is full. It returns false once the workers have
// stopped.
func (r *router) queue(qp *QP, p *link.Packet, b []byte, lent bool) bool {
	wi := int(qp.qpn % uint32(len(r.p.workers)))
	if r.batches[wi] == nil {
		if r.spare != nil {
			r.batches[wi], r.spare = r.spare, nil
		} else {
			r.batches[wi] = batchPool.Get().(*rxBatch)
		}
	}
	bt := r.batches[wi]
	bt.bufs[bt.n], bt.lent[bt.n], bt.qp[bt.n], bt.origin[bt.n] = b, lent, qp, transport.Origin{Src: p.Peer, Dst: r.dst}
	bt.pend[bt.n], bt.seed[bt.n] = lent && p.ICRCPending, p.ICRCSeed
	bt.n++
	if bt.n == len(bt.bufs) {
		r.batches[wi] = nil
		return r.deliver(r.p.workers[wi], bt)
	}
	return true
}

// pollGrace is how long after the last Device.Progress call the reader
// stays parked, unless polling ends explicitly (endPoll).
const pollGrace = time.Millisecond

// epoch is the origin of nanotime.
var epoch = time.Now()

// nanotime is a monotonic clock in nanoseconds, never 0.
func nanotime() int64 { return int64(time.Since(epoch)) + 1 }

// progress reads what has arrived on the device's link, without waiting,
// and runs it on the calling goroutine where the workers are idle. It
// returns the packets read.
func (p *dispatcher) progress(now int64) int {
	if p.lastPoll.Swap(now) == 0 {
		p.handOff()
	}
	if !p.pollMu.TryLock() {
		return 0
	}
	defer p.pollMu.Unlock()
	if p.poll == nil {
		p.poll = p.newRouter(p.dev.link, netip.Addr{})
		p.poll.poller = true
	}
	r := p.poll
	r.fill()
	n, err := r.read(false)
	if err != nil || n == 0 {
		r.used = 1 // a read that finds nothing touches at most the first slot
		if err != nil {
			r.used = len(r.pkts)
		}
		p.flushHeld(now)
		return 0
	}
	if now-p.countedAt >= int64(linkCountsEvery) {
		p.dev.updateLinkCounters()
		p.countedAt = now
	}
	r.polled = now
	r.routeAndReturn(n)
	if p.lastPoll.Load() == 0 {
		// The reader took the socket back while this turn ran (the
		// poller was held up for pollGrace between two calls) and has
		// already flushed what was held then; what this turn held
		// would wait for the next packet or a retransmission. Either
		// the reader's flushHeld sees this turn's heldAt, or this load
		// sees its reset, so one of the two writes it.
		p.flushHeld(0)
	}
	return n
}

// linkCountsEvery is how often at most a busy poll copies the link's
// counters (ICRC errors, socket drops, ...) into the device's published
// ones; the reader copies them after every batch, and polling that ends
// (endPoll, or the reader taking the socket back) once more. Copying them
// took 40-50 ns of each message a latency test's poller read, on the
// way from its arrival to the application (internal/stamp); what the
// published counters show now lags a poll's by at most this much.
// Device.Counters copies them itself.
const linkCountsEvery = time.Millisecond

// queued reports whether a worker has events queued.
func (p *dispatcher) queued() bool {
	for _, w := range p.workers {
		if w.pending.Load() != 0 {
			return true
		}
	}
	return false
}

// handOff gets the reader out of its wait, in which it holds the socket,
// and into parkWhilePolled, when polling starts. The reader waits in the Go
// netpoller, and a wait there ends only when the scheduler polls the
// network, which it does when a P finds nothing else to run: a poller
// that spun on the only P (the bandwidth tools run on one) would never
// let it, and would find the socket taken for as long as it spun
// (ib_write_bw -s 64 between two processes: 200 µs of every ~500 µs
// cycle). So the poller interrupts the wait and blocks until the reader
// says it has parked: blocking lets the scheduler poll, which wakes the
// reader on the same thread. A reader busy routing a batch parks when
// it is done; the wait is bounded by pollGrace all the same.
func (p *dispatcher) handOff() {
	select {
	case <-p.parked: // a word from an earlier time polling started
	default:
	}
	p.dev.link.Interrupt()
	t := time.NewTimer(pollGrace)
	select {
	case <-p.parked:
	case <-p.readerDone:
	case <-t.C:
		p.graceWaits.Add(1)
	}
	t.Stop()
}

// flushHeld writes the ACKs held back by pollers' turns that are due at
// now (all of them, with now 0) on workers that are idle; a busy worker
// writes them at the end of its turn.
func (p *dispatcher) flushHeld(now int64) {
	for _, w := range p.workers {
		if at := w.heldAt.Load(); at != 0 && (now == 0 || now >= at) && w.tryInline() {
			w.finish()
		}
	}
}

// endPoll gives the socket back to the reader at once.
func (p *dispatcher) endPoll() {
	p.flushHeld(0)
	p.dev.updateLinkCounters()
	p.lastPoll.Store(0)
	select {
	case p.pollWake <- struct{}{}:
	default:
	}
}

// parkWhilePolled keeps the reader off the socket while a goroutine
// busy-polls the device: a reader waiting in ReadBatch would be woken for
// the packets the poller is about to take, costing a goroutine wake-up
// per packet on the other CPU. It returns false when the device stops.
func (p *dispatcher) parkWhilePolled() bool {
	var t *time.Timer
	for {
		last := p.lastPoll.Load()
		if last == 0 {
			return true
		}
		left := pollGrace - time.Duration(nanotime()-last)
		if left <= 0 {
			if p.graceExpired != nil {
				p.graceExpired()
			}
			// The poller went away without endPoll, unless it came
			// back since the load: then the reader must park on. (It
			// used to take the socket all the same, and a poller that
			// came back while it did found the socket held by a reader
			// waiting in the netpoller on every poll for as long as it
			// polled: TestParkWhilePolledRace.)
			if !p.lastPoll.CompareAndSwap(last, 0) {
				continue
			}
			p.flushHeld(0)
			p.dev.updateLinkCounters()
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
		case <-p.pollWake:
		case <-t.C:
		case <-p.closing:
			return false
		}
	}
}

// inlineBatch is the largest batch the reader runs itself.
const inlineBatch = 4

// deliver hands a batch of received packets to its worker: run at once on
// the calling goroutine when the worker is idle, queued otherwise. It
// returns false once the worker has stopped.
func (r *router) deliver(w *worker, bt *rxBatch) bool {
	// What runs on the calling goroutine, when the worker is idle:
	//   - a lent batch (link.Lender, UDP with GRO): handing it over would
	//     cost a copy of every byte, and placing the payload now reads it
	//     while the kernel's copy left it in cache (64 KiB WRITEs: 10 %
	//     less CPU per byte);
	//   - a small batch: a lone packet, a ping-pong's, saves the wake-up
	//     of the worker; a burst of copied packets is handed over so that
	//     the reader goes back to draining the socket;
	//   - everything a busy poller reads.
	if (r.poller || bt.n <= inlineBatch || bt.lent[0]) && w.tryInline() {
		w.handleEvent(event{kind: evPackets, batch: bt})
		w.finishTurn(r.polled) // 0 but in a poller's router: finish
		r.spare = bt           // emptied: the next batch's
		return true
	}
	// The worker gets copies of what the link lent: the loan ends when
	// routing does.
	for i := range bt.n {
		if bt.lent[i] {
			c := getBuf()[:len(bt.bufs[i])]
			copy(c, bt.bufs[i])
			bt.bufs[i], bt.lent[i] = c, false
		}
	}
	return w.send(event{kind: evPackets, batch: bt})
}

// worker runs the QPs hashed to it. It implements transport.Env.
type worker struct {
	dev    *Device
	ch     chan event
	quit   chan struct{}
	exited chan struct{}
	timer  *time.Timer

	// mu is held by whoever runs the worker's QPs: the worker goroutine, or
	// a goroutine that runs them inline (see tryInline). pending counts
	// events sent to ch and not yet handled.
	mu      sync.Mutex
	pending atomic.Int64
	stopped bool // under mu: the worker has quit

	// heldAt is when the ACKs a busy poller's turn held back in tx
	// (finishTurn) are due, in nanotime; 0: none are held.
	heldAt atomic.Int64

	// Owned by the holder of mu.
	qps     map[uint32]*QP
	dirty   []*QP // QPs to run Progress on, each once (QP.dirty)
	spare   []*QP // the other dirty list, reused
	tx      []link.Packet
	bufs    [][]byte // buffers of written packets, for Buffer (keepBufs)
	held    int      // tx[:held] are ACKs held back by a poller's turn (finishTurn)
	lastReq int64    // when flush last wrote a request packet, in nanotime; 0: never
	pkt     wire.Packet
	timers  qpTimers          // QPs with a deadline, earliest first
	eager   bool              // a post is running inline: write every eagerBatch packets
	written int               // packets written in this turn (Emit's schedule)
	timerAt int64             // when the timer fires, in nanotime; 0: it is not set
	now     int64             // the step's time (clock), in nanotime; 0: not read yet
	budget  *transport.Budget // the PSNs its RC QPs may have in flight together

	// Received packets not yet added to the device's counters (countRx),
	// and the length of the one being handled, -1 when none is or it is
	// counted.
	rxPkts, rxBytes uint64
	rxCur           int
}

func (w *worker) run() {
	defer close(w.exited)
	for {
		select {
		case ev := <-w.ch:
			w.mu.Lock()
			w.handle(ev)
			for more := true; more; { // take what else is queued before writing
				select {
				case ev := <-w.ch:
					w.handle(ev)
				default:
					more = false
				}
			}
		case <-w.timer.C:
			w.mu.Lock()
			w.timerAt = 0 // the timer is no longer set
			now := w.clock()
			for len(w.timers) > 0 && now >= w.timers[0].tAt {
				qp := heap.Pop(&w.timers).(*QP)
				qp.tAt = 0
				if d := qp.t.Deadline(); d != 0 && now >= d {
					qp.t.Timeout(w)
				}
				w.markDirty(qp) // Progress, then track files its next deadline
			}
		case <-w.quit:
			w.mu.Lock()
			w.stopped = true
			w.flush()
			w.mu.Unlock()
			return
		}
		w.finish()
	}
}

// finish ends a turn on the worker: Progress for the dirty QPs, write what
// they queued, set the timer, and release the worker.
func (w *worker) finish() { w.finishTurn(0) }

// ackHold is how long a busy poller's turn may hold back the ACKs it
// queued (finishTurn): far below any retry timeout, and longer than an
// application takes to answer a message it polled for.
const ackHold = 20 * time.Microsecond

// answerWindow is how recently a worker must have written a request for a
// poller's turn on it to hold back ACKs (finishTurn).
const answerWindow = time.Millisecond

// finishTurn is finish; in a busy poller's turn, polled the nanotime of
// the poll that read the packets (0 in any other turn), when all that is
// queued are plain ACKs and the worker wrote a request of its own within
// answerWindow, they stay queued for up to ackHold. The poll's time
// decides, not a clock read of the turn's own: it is a poll's cycle old
// at most, where ackHold and answerWindow are tens of microseconds and
// more, and a read would cost the message on its way to the application
// 20-30 ns (internal/stamp). A busy poller's turn ends that way: the
// application that polled is about to post its answer, and its turn
// writes the ACK and the answer in one system call, which takes one
// system call off the critical path of every ping-pong message. A worker
// whose QPs only receive, a bandwidth test's server, has no answer to
// wait for, and holding its ACKs would only keep the sender's window shut
// longer (64-byte WRITEs between two processes, 7 alternating runs:
// without the hold 1.09× the rate over UDP, 0.81–1.25, and 1.08× over the
// same-host path, 0.92–1.32; ninth round). An
// ACK may be delayed and coalesced (IBA 9.7.5.1.2: an ACK acknowledges
// every earlier PSN). Held ACKs are written by the first of: the
// worker's next turn that is not a poller's, the poller's first poll that
// finds nothing after ackHold (dispatcher.flushHeld), the end of polling.
// No timer does it: arming one per message would wake the Go netpoller's
// thread each time, which costs more than the system call saved.
func (w *worker) finishTurn(polled int64) {
	w.progress()
	if stamp.Reached(stamp.Post) {
		stamp.Mark(stamp.Built)
	} else {
		stamp.Mark(stamp.Progress)
	}
	if at := w.heldAt.Load(); polled != 0 && w.onlyAcks() && w.answers(polled) && (at == 0 || polled < at) {
		if at == 0 {
			w.heldAt.Store(polled + int64(ackHold))
		}
		w.held = len(w.tx)
	} else {
		w.flush()
	}
	w.rearm()
	w.eager, w.written, w.now = false, 0, 0
	w.mu.Unlock()
	stamp.Mark(stamp.TurnEnd)
}

// answers reports whether the worker wrote a request within answerWindow
// of now (nanotime).
func (w *worker) answers(now int64) bool {
	return w.lastReq != 0 && now-w.lastReq < int64(answerWindow)
}

// clock returns the time of the worker's current step, in nanotime: read
// once, then the same until the step ends. A step ends where the worker
// writes (flush: a write can block on a full link, and deadlines armed
// after it with an older time would expire early), where it takes the
// next event or runs its dirty QPs (progress), and at the end of a turn.
// A ping-pong message read the clock seven to nine times on its two sides
// before, each read a vDSO call of 20-70 ns on this project's virtual
// machines (time.Now makes two, the wall clock and the monotonic one);
// now a step reads it only when something asks: the transport when it
// arms or checks a timer (Now), a poller's turn to decide whether to
// hold its ACKs (finishTurn), a write of a request (flush). No step runs
// long without writing: a QP's Progress writes every link.MaxBatch
// packets at the most (Emit).
func (w *worker) clock() int64 {
	if w.now == 0 {
		w.now = nanotime()
	}
	return w.now
}

// Now implements transport.Clock with the step's time (clock): the
// transport asks only to arm or check a timer, and a step whose packets
// arm none, as a ping-pong's WRITE and ACK do not, reads no clock.
func (w *worker) Now() int64 { return w.clock() }

// onlyAcks reports whether tx holds packets and all of them are ACKs
// without payload.
func (w *worker) onlyAcks() bool {
	for i := range w.tx {
		if wire.BTH(w.tx[i].Buf).Opcode() != wire.OpAcknowledge {
			return false
		}
	}
	return len(w.tx) > 0
}

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
// keeps its order with all other work. The caller then ends with finish.
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

// handle runs one event taken from ch.
func (w *worker) handle(ev event) {
	defer w.pending.Add(-1)
	w.handleEvent(ev)
	if ev.kind == evPackets {
		batchPool.Put(ev.batch) // emptied; a router that ran it inline keeps it instead (deliver)
	}
}

func (w *worker) handleEvent(ev event) {
	w.now = 0 // each event is a step (clock)
	switch ev.kind {
	case evPackets:
		stamp.Mark(stamp.Handle)
		for i := range ev.batch.n {
			b := ev.batch.bufs[i]
			ev.batch.bufs[i] = nil
			qp := ev.batch.qp[i]
			ev.batch.qp[i] = nil
			if qp != nil && !qp.live {
				qp = nil // destroyed since the router found it
			}
			err := w.pkt.Parse(b)
			if ev.batch.pend[i] {
				w.pkt.DeferICRC(ev.batch.seed[i])
				ev.batch.pend[i] = false
			}
			if err == nil && qp != nil {
				w.rxCur = len(b) // counted by a completion it brings (countRx)
				qp.t.ReceiveFrom(&w.pkt, ev.batch.origin[i], w)
				w.markDirty(qp)
			}
			// A pending ICRC the transport did not need (the packet was
			// dropped unread) is checked for the counters.
			switch {
			case !w.pkt.CheckICRC():
				w.dev.icrc.CountICRCError()
			case err != nil || qp == nil:
				w.dev.stats.Inc(stats.Malformed)
			default:
				w.takeCur()
			}
			w.rxCur = -1
			if !ev.batch.lent[i] {
				putBuf(b)
			}
			ev.batch.lent[i] = false
		}
		w.countRx()
		stamp.Mark(stamp.Received)
		ev.batch.n = 0
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

// countRx adds the packets received so far in a batch, and the one being
// handled (rxCur), to the device's counters. A batch adds them once, at
// its end, as the counters are shared by every goroutine; but a completion
// that a packet brings must not be seen before that packet is counted (a
// tool that prints its counters after its last completion would miss it),
// so the QPs' CQs call this before each completion (countedCQ). A packet
// whose ICRC is checked later, as the transport reads it (the same-host
// path), is known good by then: the transport completes nothing for a
// packet it dropped.
func (w *worker) countRx() {
	w.takeCur()
	if w.rxPkts > 0 {
		w.dev.stats.Add(stats.RcvdPkts, w.rxPkts)
		w.dev.stats.Add(stats.RcvdBytes, w.rxBytes)
		w.rxPkts, w.rxBytes = 0, 0
	}
}

// takeCur adds the packet being handled (rxCur), unless a completion it
// brought has counted it already, to those received in the batch.
func (w *worker) takeCur() {
	if w.rxCur >= 0 {
		w.rxPkts++
		w.rxBytes += uint64(w.rxCur)
		w.rxCur = -1
	}
}

// countedCQ is the transport's view of a QP's CQ: each completion first
// counts the packets received before it (worker.countRx).
type countedCQ struct {
	cq *CQ
	w  *worker
}

// Push implements transport.CQ.
func (c *countedCQ) Push(wc WC, solicited bool) {
	c.w.countRx()
	c.cq.Push(wc, solicited)
}

// markDirty queues qp for Progress, once.
func (w *worker) markDirty(qp *QP) {
	if !qp.dirty {
		qp.dirty = true
		w.dirty = append(w.dirty, qp)
	}
}

// progress runs the dirty QPs until they have nothing more to send now.
// A QP that still has work after its turn goes to the back of the line,
// so one busy QP does not hold up the others.
func (w *worker) progress() {
	// A step of its own (clock): handling a batch before it can have
	// taken a while, and a deadline armed from its time (an RNR timer of
	// 10 µs) would come early.
	w.now = 0
	for len(w.dirty) > 0 {
		list := w.dirty
		w.dirty = w.spare[:0]
		for i, qp := range list {
			qp.dirty = false
			qp.t.Progress(w) // a flush since the last read reads it again
			w.track(qp)
			if qp.t.Busy() {
				w.flush()
				w.markDirty(qp)
				select { // let queued events in before continuing
				case ev := <-w.ch:
					w.handle(ev)
				default:
					if w.pending.Load() > 0 {
						// An event was taken from ch and waits for the
						// worker (an inline holder has it): hand over,
						// keeping the rest of the turn queued.
						w.dirty = append(w.dirty, list[i+1:]...)
						clear(list)
						w.spare = list[:0]
						return
					}
				}
			}
		}
		clear(list)
		w.spare = list[:0]
	}
}

// rearm makes sure the timer fires by the earliest QP deadline. It moves
// the timer only when that deadline comes sooner than the one the timer is
// set for: a timer that fires early finds nothing due and is set again.
// Most turns move a deadline later (an ACK restarts the retry timer of a
// QP that is still sending), and leaving the timer alone then saves two
// operations on the runtime's timer heap, with its lock, per message.
func (w *worker) rearm() {
	if len(w.timers) == 0 {
		return // an armed timer fires once more and finds nothing due
	}
	at := w.timers[0].tAt
	if w.timerAt != 0 && at >= w.timerAt {
		return
	}
	w.timer.Reset(max(time.Duration(at-w.clock()), 0))
	w.timerAt = at
}

// track files qp's transport deadline in the worker's timer heap. A QP's
// deadline changes only while the worker runs it (a packet, a kick, a
// call, a timeout), and each of those ends in progress, which calls track:
// so the heap stays exact at O(log n) per change, and a worker with
// 100,000 idle QPs does not scan them after every event.
func (w *worker) track(qp *QP) {
	d := qp.t.Deadline()
	if d == qp.tAt && (d == 0) == (qp.tIndex == 0) {
		return
	}
	qp.tAt = d
	switch {
	case d == 0 && qp.tIndex > 0:
		heap.Remove(&w.timers, qp.tIndex-1)
	case d == 0:
	case qp.tIndex > 0:
		heap.Fix(&w.timers, qp.tIndex-1)
	default:
		heap.Push(&w.timers, qp)
	}
}

// qpTimers is a min-heap of QPs by deadline; QP.tIndex is its index + 1.
type qpTimers []*QP

func (h qpTimers) Len() int           { return len(h) }
func (h qpTimers) Less(i, j int) bool { return h[i].tAt < h[j].tAt }
func (h qpTimers) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].tIndex, h[j].tIndex = i+1, j+1
}
func (h *qpTimers) Push(x any) {
	qp := x.(*QP)
	qp.tIndex = len(*h) + 1
	*h = append(*h, qp)
}
func (h *qpTimers) Pop() any {
	old := *h
	qp := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	qp.tIndex = 0
	return qp
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

// Emit implements transport.Env: packets are written in batches, which
// grow through a turn (firstWrite, then as many as the turn has written
// so far, at least twice firstWrite, up to link.MaxBatch), and end early
// where Push asks.
func (w *worker) Emit(p link.Packet) {
	w.tx = append(w.tx, p)
	if len(w.tx) >= w.writeAt() || w.eager && len(w.tx) >= eagerBatch {
		w.flush()
	}
}

// writeAt is how many queued packets make Emit write them. The second
// write takes up to 2*firstWrite packets, not firstWrite as the rule
// would, so that Push can end it: perftest's signaled WR, the 72nd of a
// turn of 100 (see Push), then goes with the second write, where a
// second write of 32 would leave it to a third of 8 and the rest to a
// fourth. Bandwidth with 64 KiB WRITEs did not change (12 alternating
// runs, 7 faster).
func (w *worker) writeAt() int {
	if w.written == 0 {
		return firstWrite
	}
	return min(max(w.written, 2*firstWrite), link.MaxBatch)
}

// Push implements transport.Env: the queued packets are written now if
// there are at least pushWrite of them. With perftest's bandwidth defaults
// (128 WRs outstanding, every 100th signaled) the signaled WR is the 72nd
// of the 100 a turn posts: written with the 40 before it, the peer's ACK
// comes back while the last 28 are built and sent, instead of after the
// peer has placed all 100, and the poster finds its completion as soon as
// its turn ends. 64-byte WRITEs between two processes: 1.21× the rate over
// UDP (8 alternating runs, all faster), 1.4× over the same-host path.
// Fewer queued packets wait for the schedule, so that a WR signaled every
// few does not cost a system call each.
func (w *worker) Push() {
	if len(w.tx) >= pushWrite {
		w.flush()
	}
}

// firstWrite is how many packets a turn queues before its first write.
// The peer starts on them while the rest of the turn is built: with
// perftest's bandwidth defaults (128 WRs outstanding, one completion per
// 100) a turn of small messages sends about 100 packets, and the peer
// would otherwise sit idle until all of them were built, then the poster
// until the peer had handled them all. Later writes grow (writeAt), so a
// long turn (large messages, a busy pipeline) costs only a few more
// system calls. 64-byte WRITEs: +11 % over UDP and +14 % over the
// same-host path (docs/perf/HISTORY.md, sixth round); writing every 24 or
// 32 packets throughout did as well for them but cost 64 KiB WRITEs over
// UDP 12-19 %.
const firstWrite = 32

// pushWrite is the fewest queued packets that Push writes.
const pushWrite = firstWrite / 2

// eagerBatch is how many packets a post run inline on an idle worker (a
// ping-pong's) queues before writing them, when the link writes cheaply
// (Device.eagerLink): a multi-packet message then reaches the peer in
// pieces that it starts placing while the rest is being built, instead of
// all at once (64 KiB one way, same-host path: 38.6 → 28.7 µs). Over UDP
// each write is a system call, and writing in pieces made it slower.
// Bandwidth tests post to busy queues, which the worker runs in batches
// of up to MaxBatch.
const eagerBatch = 4

// eagerLink reports whether the device's link writes cheaply enough for
// eagerBatch: it has same-host channels open.
func (d *Device) eagerLink() bool { return d.shm != nil && d.shm.SameHostActive() }

// Gathers implements transport.Env: every link takes a payload from where
// it lies (link.Packet.Payload). The same-host path copies it from the MR
// straight into the ring, the UDP socket path into the packet's buffer as
// it computes the ICRC (one pass instead of a copy and a CRC), and the
// in-memory and fault-stage links put the packet together first, as the
// transport would have.
func (w *worker) Gathers() bool { return true }

// Fatal implements transport.Env.
func (w *worker) Fatal(t *transport.QP, _ transport.WCStatus) {
	if qp := w.qps[t.QPN()]; qp != nil {
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
	if h := w.held; h > 0 {
		// The held ACKs go after what was queued since: the answer a
		// poller's application posted leaves first, and its receiver,
		// polling, has it while the kernel is still delivering the ACK
		// (a small datagram costs ≈ 2 µs of sendmmsg on loopback). An
		// ACK and a request travel in independent PSN spaces; their
		// order is free.
		w.held = 0
		slices.Reverse(w.tx[:h])
		slices.Reverse(w.tx[h:])
		slices.Reverse(w.tx)
	}
	for i := range w.tx {
		if wire.BTH(w.tx[i].Buf).Opcode().Info().Class == wire.ClassRequest {
			w.lastReq = w.clock()
			break
		}
	}
	for len(w.tx) > 0 {
		n, err := w.dev.link.WriteBatch(w.tx)
		var bytes uint64
		for i := range n {
			bytes += uint64(len(w.tx[i].Buf) + len(w.tx[i].Payload))
		}
		w.dev.stats.Add(stats.SentBytes, bytes)
		w.dev.stats.Add(stats.SentPkts, uint64(n))
		w.written += n
		if err != nil && n == 0 {
			n = 1 // drop the packet the link refused; the transport retries
			w.dev.stats.Inc(stats.SendErr)
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

// kick queues a kick event for qp.
func (w *worker) kick(qp *QP) {
	if w.tryInline() {
		stamp.Mark(stamp.Inline)
		qp.kicked.Store(false)
		w.markDirty(qp)
		w.eager = w.dev.eagerLink() // until finish ends the turn
		w.finish()
		return
	}
	w.send(event{kind: evKick, qp: qp})
}

// call runs fn on the worker and waits for it; after the worker has
// stopped, fn runs on the caller.
func (w *worker) call(fn func()) { w.callQP(nil, fn) }

// callQP is call for work on one QP, which then gets a Progress turn.
func (w *worker) callQP(qp *QP, fn func()) {
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
	if qp.tIndex > 0 {
		heap.Remove(&w.timers, qp.tIndex-1)
	}
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
