package device

import (
	"net/netip"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/stamp"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/transport"
	"github.com/goroce/goroce/internal/wire"
)

// Receive demultiplexing (rxe_recv.c: rxe_rcv). The link has checked each
// packet's length and ICRC, or left the ICRC to the transport
// (link.CapDeferICRC); the router looks the destination QP up and hands
// the packet to that QP's worker:
//
//	destination QPN 0xFFFFFF   a copy for every QP attached to the group the
//	                           packet was sent to (IBA 10.5); only a group's
//	                           link carries them, elsewhere it is malformed
//	a QPN in the table         the QP's worker, in a batch per worker
//	any other QPN              counted as malformed and dropped
//
// The transport then checks the packet against the QP (transport.QP.
// ReceiveFrom: header, transport type, state) and runs the responder or
// the completer.

// readLink reads l until it closes and routes its packets to the workers.
// group is the multicast group l receives for, or the zero Addr for the
// device's unicast link, whose reader steps aside while the device is
// busy-polled.
func (e *Engine) readLink(l link.Link, group netip.Addr) {
	r := e.newRouter(l, group)
	defer r.release()
	for {
		if !group.IsValid() && !e.parkWhilePolled() {
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
			e.updateLinkCounters()
		}
		if !r.routeAndReturn(n) {
			return
		}
	}
}

// router routes the packets one goroutine reads to the workers.
type router struct {
	e         *Engine
	link      link.Link
	lend      bool // the link lends packets (link.CapLend)
	pkts      [link.MaxBatch]link.Packet
	batches   []*rxBatch // per worker, the batch being filled
	group     netip.Addr // the multicast group read, or the zero Addr
	dst       netip.Addr // the packets' destination address
	used      int        // pkts[:used] may need a buffer or their full length back
	freeBatch *rxBatch   // a batch run inline, kept for the next (no trip to batchPool)

	// A busy poller's router runs every batch on its own goroutine when
	// the worker is idle, and leaves the ACKs that come of it queued for
	// a moment (worker.endTurn); the reader runs only small batches.
	// polled is the time of the poll being routed; zero in any other
	// router.
	poller bool
	polled monotime.Time
}

func (e *Engine) newRouter(l link.Link, group netip.Addr) *router {
	r := &router{e: e, link: l, batches: make([]*rxBatch, len(e.workers)), group: group, dst: e.dst, used: link.MaxBatch}
	if group.IsValid() {
		r.dst = group
	}
	r.lend = l.Caps()&link.CapLend != 0
	return r
}

// read reads a batch from the link, borrowing the packets if it lends
// them.
func (r *router) read(wait bool) (int, error) {
	switch {
	case r.lend:
		return r.link.ReadLent(r.pkts[:], wait)
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
	if r.lend {
		r.link.ReturnLent()
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
	e := r.e
	r.used = min(n+1, len(r.pkts))
	for i := range n {
		b, lent := r.pkts[i].Lent, true
		if b == nil {
			b, lent = r.pkts[i].Buf, false
		}
		qpn := wire.BTH(b).DestQP()
		if qpn == transport.MulticastQPN {
			// IBA 10.5: a copy for every QP attached to the group. Only
			// group links carry them (the unicast socket never sees a
			// group address).
			if r.group.IsValid() {
				if !r.intact(&r.pkts[i]) {
					continue
				}
				for _, qp := range e.groups.attached(r.group) {
					c := getBuf()[:len(b)]
					copy(c, b)
					if !r.queue(qp, &link.Packet{Peer: r.pkts[i].Peer}, c, false) {
						return false
					}
				}
			} else {
				e.stats.Inc(stats.Malformed)
			}
			continue // the buffer is reused
		}
		qp := e.tab.load(qpn)
		if qp == nil || r.group.IsValid() {
			if r.intact(&r.pkts[i]) {
				e.stats.Inc(stats.Malformed) // no such QP: dropped (the buffer is reused)
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
		if !r.deliver(e.workers[wi], bt) {
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
	r.e.deferredICRC.Add(1)
	return false
}

// queue adds packet b, read as p, for qp to its worker's batch, handing
// the batch over when it is full. It returns false once the workers have
// stopped.
func (r *router) queue(qp *QP, p *link.Packet, b []byte, lent bool) bool {
	wi := int(qp.qpn % uint32(len(r.e.workers)))
	if r.batches[wi] == nil {
		if r.freeBatch != nil {
			r.batches[wi], r.freeBatch = r.freeBatch, nil
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
		return r.deliver(r.e.workers[wi], bt)
	}
	return true
}

// inlineBatch is the largest batch the reader runs itself
// (docs/design/tuning.md#inline-batch).
const inlineBatch = 4

// deliver hands a batch of received packets to its worker: run at once on
// the calling goroutine when the worker is idle, queued otherwise. It
// returns false once the worker has stopped.
//
// What runs on the calling goroutine, when the worker is idle:
//   - a lent batch (link.CapLend, UDP with GRO): handing it over would cost
//     a copy of every byte, and placing the payload now reads it while the
//     kernel's copy left it in cache;
//   - a small batch: a lone packet, a ping-pong's, saves the wake-up of
//     the worker; a burst of copied packets is handed over so that the
//     reader goes back to draining the socket;
//   - everything a busy poller reads.
func (r *router) deliver(w *worker, bt *rxBatch) bool {
	if (r.poller || bt.n <= inlineBatch || bt.lent[0]) && w.tryInline() {
		w.handle(event{kind: evPackets, batch: bt})
		w.endTurn(r.polled) // zero but in a poller's router
		r.freeBatch = bt    // emptied: the next batch's
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
