package device

import (
	"sync/atomic"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/stamp"
	"github.com/goroce/goroce/internal/transport"
)

// QP is the engine's side of a queue pair: its transport, the worker that
// owns it, and its place in the worker's queues and timers. Its methods
// may be called from any goroutine.
type QP struct {
	e      *Engine
	t      *transport.QP // owned by the worker
	w      *worker
	qpn    uint32
	fatal  func() // runs on the worker when the transport moves the QP to ERR
	kicked atomic.Bool
	posts  atomic.Uint32 // how posts arrive (postIdle, postBurst): PostSend

	// Owned by the worker.
	dirty  bool          // queued for Progress on its worker
	live   bool          // in its worker's table (the worker takes packets for it)
	tAt    monotime.Time // the deadline filed in the worker's timer heap
	tIndex int           // index + 1 in the timer heap, 0 when not in it

	sendCQ, recvCQ countedCQ // the transport's CQs, counting what arrived first
}

// NewQP creates a QP under the next free QPN, with the transport
// configuration cfg; the engine fills its QPN, counters, send window,
// budget and placement, and counts completions on cfg's CQs. fatal, if not
// nil, runs on the QP's worker when the transport moves the QP to the
// error state.
func (e *Engine) NewQP(cfg transport.Config, fatal func()) (*QP, error) {
	e.qps.Lock()
	if e.cfg.MaxQP > 0 && e.qps.n >= e.cfg.MaxQP {
		e.qps.Unlock()
		return nil, ErrTooManyQPs
	}
	for {
		e.qps.last = (e.qps.last + 1) & 0xffffff
		if e.qps.last < 0x11 {
			e.qps.last = 0x11
		}
		if e.tab.load(e.qps.last) == nil {
			break
		}
	}
	qp := &QP{e: e, qpn: e.qps.last, fatal: fatal}
	w := e.workerFor(qp.qpn)
	qp.w = w
	qp.sendCQ, qp.recvCQ = countedCQ{cfg.SendCQ, w}, countedCQ{cfg.RecvCQ, w}
	cfg.QPN, cfg.SendCQ, cfg.RecvCQ = qp.qpn, &qp.sendCQ, &qp.recvCQ
	cfg.Stats, cfg.Window, cfg.Budget, cfg.Placement = e.stats, sendWindow, w.budget, e.placement
	qp.t = transport.NewQP(cfg, w)
	e.tab.store(qp) // packets for it until the call below are dropped (not live)
	e.qps.n++
	e.qps.Unlock()
	w.call(func() { w.qps[qp.qpn], qp.live = qp, true })
	return qp, nil
}

// QPN returns the QP's number.
func (q *QP) QPN() uint32 { return q.qpn }

// PostSend posts send work requests (transport.QP.PostSend) on the calling
// goroutine, the QP being in state, and starts them: on this goroutine if
// they found the send queue idle and the worker is idle (postsInline),
// else on the worker.
func (q *QP) PostSend(wrs []transport.SendWR, state qpstate.State) (int, error) {
	stamp.Mark(stamp.Post)
	n, err := q.t.PostSend(wrs, state)
	stamp.Mark(stamp.Posted)
	if n > 0 {
		if q.postsInline(q.t.SendQueueLen(), n) {
			q.kickInline()
		} else {
			q.Kick()
		}
	}
	return n, err
}

// PostRecv posts receive work requests to the QP's receive queue.
func (q *QP) PostRecv(wrs []transport.RecvWR) (int, error) { return q.t.RecvQueue().Post(wrs) }

// FlushRecv completes the posted receive work requests with WR_FLUSH_ERR,
// as a QP in the error state does at once with what is posted to it.
func (q *QP) FlushRecv() { q.w.callOn(q, func() { q.t.SetState(qpstate.Err) }) }

// postsInline reports whether the n WQEs just posted, which leave queued
// WQEs in the send queue, go out at once from the posting goroutine
// rather than from the worker's next turn.
//
// Work posted to an idle queue (a ping-pong's) goes out at once; a queue
// with work already outstanding (a bandwidth test's) is left to the
// worker, which batches it. Except that when the last post to an idle
// queue was followed by a burst before the queue emptied, this one likely
// starts a burst too (ib_write_bw refills its window 100 WRs at a time):
// sent alone it would cost a write of its own and an ACK, so it waits for
// the worker's turn, with those that follow. A post that finds the queue
// idle twice in a row goes inline again; one that finds a single WQE
// outstanding (a ping-pong's whose ACK is late) changes nothing.
func (q *QP) postsInline(queued, n int) bool {
	if queued != n {
		if queued-n >= 2 {
			q.posts.Store(postBurst)
		}
		return false
	}
	return q.posts.Swap(postIdle) != postBurst
}

// How a QP's posts arrive (QP.posts).
const (
	postIdle  = 1 + iota // the last post to an idle send queue stands alone so far
	postBurst            // it was followed by posts that found two or more WQEs outstanding
)

// Kick asks the QP's worker to run its requester.
func (q *QP) Kick() {
	if !q.kicked.Swap(true) {
		q.w.send(event{kind: evKick, qp: q})
	}
}

// kickInline runs the QP now on this goroutine if its worker is idle, and
// kicks it otherwise.
func (q *QP) kickInline() {
	if !q.kicked.Swap(true) {
		q.w.kick(q)
	}
}

// Modify applies a modify_qp the caller has checked: the connection's path
// and the next state. A QP that moves to RTR gets its path ready in the
// link now, not on its first packet (link.CapConnectPort); an RC QP whose
// peer the link segments for sends its WRITEs as WRITE_ONLY packets
// (transport.Path.SplitWrites).
func (q *QP) Modify(path transport.Path, next qpstate.State) {
	if path.Peer.IsValid() {
		path.SplitWrites = q.e.splitWrites(path.Peer) // the transport applies it to RC WRITEs only
		if next == qpstate.RTR && q.e.caps&link.CapConnectPort != 0 {
			q.e.link.ConnectPort(path.SrcPort, path.Peer)
		}
	}
	q.w.call(func() {
		q.t.SetPath(path)
		q.t.SetState(next)
	})
	q.Kick()
}

// Destroy removes the QP: its QPN stops receiving, the ACKs of what the
// peer already delivered go out (transport.QP.Quiesce), and outstanding
// work requests are dropped. It never waits for the peer.
func (q *QP) Destroy() {
	e := q.e
	e.qps.Lock()
	e.tab.delete(q.qpn)
	e.qps.n--
	e.qps.Unlock()
	q.w.call(func() {
		q.t.Quiesce()
		q.w.flush()
		q.t.SetState(qpstate.Reset)
		q.w.forget(q)
	})
}

// Call runs fn with the QP's transport on its worker, and waits for it.
func (q *QP) Call(fn func(*transport.QP)) { q.w.call(func() { fn(q.t) }) }

// Debug describes the QP's transport state in one line (PSNs, queues,
// timers), for diagnosing a stuck QP.
func (q *QP) Debug() string {
	var s string
	q.Call(func(t *transport.QP) { s = t.Debug() })
	return s
}
