package verbs

import (
	"container/heap"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/link"
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
	qpn    [link.MaxBatch]uint32 // the QP each packet is for (multicast: one copy per QP)
	origin [link.MaxBatch]transport.Origin
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
}

func newDispatcher(d *Device, n int) *dispatcher {
	if n <= 0 {
		n = min(runtime.GOMAXPROCS(0), 4)
	}
	p := &dispatcher{dev: d, readerDone: make(chan struct{})}
	for range n {
		w := &worker{dev: d, ch: make(chan event, 1024), quit: make(chan struct{}), exited: make(chan struct{}),
			qps: map[uint32]*QP{}, timer: time.NewTimer(time.Hour)}
		w.timer.Stop()
		p.workers = append(p.workers, w)
		go w.run()
	}
	go p.read()
	return p
}

func (p *dispatcher) workerFor(qpn uint32) *worker { return p.workers[qpn%uint32(len(p.workers))] }

// stop ends the workers; the reader ends when the link closes.
func (p *dispatcher) stop() {
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
// device's unicast link.
func (p *dispatcher) readLink(l link.Link, group netip.Addr) {
	var pkts [link.MaxBatch]link.Packet
	batches := make([]*rxBatch, len(p.workers))
	dst := p.dev.cfg.Addr
	if group.IsValid() {
		dst = group
	}
	for {
		for i := range pkts {
			if cap(pkts[i].Buf) == 0 {
				pkts[i].Buf = fullBuf()
			}
			pkts[i].Buf = pkts[i].Buf[:link.MaxPacket]
		}
		n, err := l.ReadBatch(pkts[:])
		if err != nil {
			for i := range pkts {
				putBuf(pkts[i].Buf)
			}
			return
		}
		if !group.IsValid() {
			p.dev.updateLinkCounters()
		}
		for i := range n {
			b := pkts[i].Buf
			qpn := wire.BTH(b).DestQP()
			if qpn == transport.MulticastQPN {
				// IBA multicast: a copy for every QP attached to the group.
				// Only group links carry them (the unicast socket never
				// sees a group address).
				if group.IsValid() {
					for _, qp := range p.dev.mcastQPs(group) {
						c := getBuf()[:len(b)]
						copy(c, b)
						if !p.queue(batches, qp, c, pkts[i].Peer, dst) {
							return
						}
					}
				} else {
					p.dev.stats.Inc(stats.Malformed)
				}
				continue // the buffer is reused
			}
			v, _ := p.dev.qpTable.Load(qpn)
			qp, _ := v.(*QP)
			if qp == nil || group.IsValid() {
				p.dev.stats.Inc(stats.Malformed) // no such QP: dropped (the buffer is reused)
				continue
			}
			if !p.queue(batches, qp, b, pkts[i].Peer, dst) {
				return
			}
			pkts[i].Buf = nil
		}
		for wi, bt := range batches {
			if bt == nil {
				continue
			}
			batches[wi] = nil
			if !p.deliver(p.workers[wi], bt) {
				return
			}
		}
	}
}

// queue adds a packet for qp to its worker's batch, handing the batch over
// when it is full. It returns false once the workers have stopped.
func (p *dispatcher) queue(batches []*rxBatch, qp *QP, b []byte, from netip.AddrPort, dst netip.Addr) bool {
	wi := int(qp.qpn % uint32(len(p.workers)))
	if batches[wi] == nil {
		batches[wi] = batchPool.Get().(*rxBatch)
	}
	bt := batches[wi]
	bt.bufs[bt.n], bt.qpn[bt.n], bt.origin[bt.n] = b, qp.qpn, transport.Origin{Src: from, Dst: dst}
	bt.n++
	if bt.n == len(bt.bufs) {
		batches[wi] = nil
		return p.deliver(p.workers[wi], bt)
	}
	return true
}

// inlineBatch is the largest batch the reader runs itself.
const inlineBatch = 4

// deliver hands a batch of received packets to its worker: run at once on
// the reader when the worker is idle, queued otherwise. It returns false
// once the worker has stopped.
func (p *dispatcher) deliver(w *worker, bt *rxBatch) bool {
	// Only small batches run on the reader: a burst is handed over so that
	// the reader goes back to draining the socket (a full socket buffer
	// drops packets), while a lone packet — a ping-pong's — saves the
	// wake-up of the worker.
	if bt.n <= inlineBatch && w.tryInline() {
		w.handleEvent(event{kind: evPackets, batch: bt})
		w.finish()
		return true
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

	// Owned by the holder of mu.
	qps    map[uint32]*QP
	dirty  []*QP // QPs to run Progress on, each once (QP.dirty)
	spare  []*QP // the other dirty list, reused
	tx     []link.Packet
	pkt    wire.Packet
	timers qpTimers // QPs with a deadline, earliest first
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
			now := time.Now()
			for len(w.timers) > 0 && !now.Before(w.timers[0].tAt) {
				qp := heap.Pop(&w.timers).(*QP)
				qp.tAt = time.Time{}
				if d := qp.t.Deadline(); !d.IsZero() && !now.Before(d) {
					qp.t.Timeout(now)
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
func (w *worker) finish() {
	w.progress()
	w.flush()
	w.rearm()
	w.mu.Unlock()
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

// handle runs one event taken from ch (or, for a batch, one an inline
// reader hands over: handleInline).
func (w *worker) handle(ev event) {
	defer w.pending.Add(-1)
	w.handleEvent(ev)
}

func (w *worker) handleEvent(ev event) {
	switch ev.kind {
	case evPackets:
		now := time.Now()
		for i := range ev.batch.n {
			b := ev.batch.bufs[i]
			ev.batch.bufs[i] = nil
			qp := w.qps[ev.batch.qpn[i]]
			if err := w.pkt.Parse(b); err == nil && qp != nil {
				w.dev.stats.Inc(stats.RcvdPkts)
				w.dev.stats.Add(stats.RcvdBytes, uint64(len(b)))
				qp.t.ReceiveFrom(&w.pkt, ev.batch.origin[i], now)
				w.markDirty(qp)
			} else {
				w.dev.stats.Inc(stats.Malformed)
			}
			putBuf(b)
		}
		ev.batch.n = 0
		batchPool.Put(ev.batch)
	case evKick:
		ev.qp.kicked.Store(false)
		w.markDirty(ev.qp)
	case evCall:
		ev.fn()
		close(ev.done)
		if ev.qp != nil && w.qps[ev.qp.qpn] == ev.qp {
			w.markDirty(ev.qp) // the call may have changed its state and deadline
		}
	}
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
	for len(w.dirty) > 0 {
		list := w.dirty
		w.dirty = w.spare[:0]
		for i, qp := range list {
			qp.dirty = false
			// A fresh time for each step: writing can block on a full link,
			// and timers armed with a stale time would expire early.
			qp.t.Progress(time.Now())
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

// rearm sets the timer to the earliest QP deadline.
func (w *worker) rearm() {
	w.timer.Stop()
	if len(w.timers) > 0 {
		w.timer.Reset(max(time.Until(w.timers[0].tAt), 0))
	}
}

// track files qp's transport deadline in the worker's timer heap. A QP's
// deadline changes only while the worker runs it (a packet, a kick, a
// call, a timeout), and each of those ends in progress, which calls track:
// so the heap stays exact at O(log n) per change, and a worker with
// 100,000 idle QPs does not scan them after every event.
func (w *worker) track(qp *QP) {
	d := qp.t.Deadline()
	if d.Equal(qp.tAt) && (d.IsZero() == (qp.tIndex == 0)) {
		return
	}
	qp.tAt = d
	switch {
	case d.IsZero() && qp.tIndex > 0:
		heap.Remove(&w.timers, qp.tIndex-1)
	case d.IsZero():
	case qp.tIndex > 0:
		heap.Fix(&w.timers, qp.tIndex-1)
	default:
		heap.Push(&w.timers, qp)
	}
}

// qpTimers is a min-heap of QPs by deadline; QP.tIndex is its index + 1.
type qpTimers []*QP

func (h qpTimers) Len() int           { return len(h) }
func (h qpTimers) Less(i, j int) bool { return h[i].tAt.Before(h[j].tAt) }
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

// Buffer implements transport.Env.
func (w *worker) Buffer() []byte { return getBuf() }

// Emit implements transport.Env: packets are written in batches.
func (w *worker) Emit(p link.Packet) {
	w.tx = append(w.tx, p)
	if len(w.tx) == link.MaxBatch {
		w.flush()
	}
}

// Fatal implements transport.Env.
func (w *worker) Fatal(t *transport.QP, _ transport.WCStatus) {
	if qp := w.qps[t.QPN()]; qp != nil {
		qp.fatal()
	}
}

// flush writes the queued packets.
func (w *worker) flush() {
	for len(w.tx) > 0 {
		n, err := w.dev.link.WriteBatch(w.tx)
		for i := range n {
			w.dev.stats.Add(stats.SentBytes, uint64(len(w.tx[i].Buf)))
		}
		w.dev.stats.Add(stats.SentPkts, uint64(n))
		if err != nil && n == 0 {
			n = 1 // drop the packet the link refused; the transport retries
			w.dev.stats.Inc(stats.SendErr)
		}
		for i := range n {
			putBuf(w.tx[i].Buf)
			w.tx[i] = link.Packet{}
		}
		w.tx = w.tx[:copy(w.tx, w.tx[n:])]
	}
}

// kick queues a kick event for qp.
func (w *worker) kick(qp *QP) {
	if w.tryInline() {
		qp.kicked.Store(false)
		w.markDirty(qp)
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
