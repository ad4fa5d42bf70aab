package transport

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/psn"
)

// sendWQE is a posted send work request and the requester's and
// completer's progress on it. Slots are reused: sgl and inline keep their
// backing arrays across posts, so posting allocates nothing once warm.
type sendWQE struct {
	wr       SendWR
	sgl      []memory.SGE // wr.SGL copied at post time
	inline   []byte       // SendInline: the data copied at post time
	signaled bool
	length   uint64         // message length in bytes
	dest     netip.AddrPort // UD: the peer, resolved from the AH at post time

	// Requester and completer state, owned by the QP's worker.
	firstPSN psn.PSN  // PSN of the first packet (READ: of the request and first response)
	npkts    int      // PSNs the message uses (READ: response packets)
	started  bool     // the first packet has gone out
	sent     bool     // every packet has gone out
	acked    bool     // send/write: covered by an ACK; read/atomic: responses received
	placed   uint64   // READ: response bytes placed
	failed   WCStatus // not SUCCESS: the WQE failed and completes with this status
}

func (w *sendWQE) lastPSN() psn.PSN { return w.firstPSN.Add(w.npkts - 1) }

// expectedPSN is the first PSN of w the completer still waits for: after a
// READ's placed response packets, otherwise its first PSN.
func (w *sendWQE) expectedPSN(mtu int) psn.PSN {
	return w.firstPSN.Add(int(w.placed / uint64(mtu)))
}

// isReadOrAtomic reports whether the WQE is answered with data (an RDMA READ
// response or an ATOMIC ACKNOWLEDGE) rather than a plain ACK.
func (w *sendWQE) isReadOrAtomic() bool {
	switch w.wr.Opcode {
	case WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		return true
	}
	return false
}

// SendQueue is a QP's send queue: a ring of WQEs. Posting runs on the
// caller's goroutine and takes the lock, which orders posters; everything
// else runs on the QP's worker, which owns the slots between head and
// tail. A poster fills a slot before it moves tail past it, and the worker
// is done with a slot before it moves head past it, so both indexes are
// read without the lock: the worker looks at tail several times per
// message, and a lock and unlock each time would be a large share of a
// ping-pong's own work.
// Chosen by measurement: docs/design/tuning.md#send-queue-indexes.
type SendQueue struct {
	mu   sync.Mutex // held by posters and by clear
	ring []sendWQE
	head atomic.Uint64 // oldest WQE not yet completed (completer)
	tail atomic.Uint64 // next free slot (posters)
}

// NewSendQueue makes a send queue of the given depth.
func NewSendQueue(depth int) *SendQueue { return &SendQueue{ring: make([]sendWQE, depth)} }

// Depth returns the number of slots.
func (q *SendQueue) Depth() int { return len(q.ring) }

func (q *SendQueue) slot(i uint64) *sendWQE { return &q.ring[i%uint64(len(q.ring))] }

// bounds returns head and tail. Head is loaded first: tail only moves
// forward (clear aside, which sets it to head), so head <= tail.
func (q *SendQueue) bounds() (head, tail uint64) {
	return q.head.Load(), q.tail.Load()
}

// retire advances head past completed WQEs.
func (q *SendQueue) retire(head uint64) { q.head.Store(head) }

// clear drops every posted WQE (entering RESET).
func (q *SendQueue) clear() {
	q.mu.Lock()
	q.tail.Store(q.head.Load())
	q.mu.Unlock()
}

// recvWQE is a posted receive work request.
type recvWQE struct {
	wrid uint64
	sgl  []memory.SGE
}

// RecvQueue is a receive queue, a QP's own or a shared receive queue (SRQ)
// that several QPs' workers take from; all access takes the lock.
type RecvQueue struct {
	mu       sync.Mutex
	ring     []recvWQE
	head     uint64
	tail     uint64
	limit    int    // SRQ limit: armed when > 0
	onLimit  func() // called (without the lock) when the count falls below limit
	disarmed bool
}

// NewRecvQueue makes a receive queue of the given depth.
func NewRecvQueue(depth int) *RecvQueue { return &RecvQueue{ring: make([]recvWQE, depth)} }

// Depth returns the number of slots.
func (q *RecvQueue) Depth() int { return len(q.ring) }

// Post appends receive work requests. It returns the index of the first
// one that did not fit (len(wrs) if all did) and ErrQueueFull for it.
func (q *RecvQueue) Post(wrs []RecvWR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range wrs {
		if q.tail-q.head == uint64(len(q.ring)) {
			return i, ErrQueueFull
		}
		s := &q.ring[q.tail%uint64(len(q.ring))]
		s.wrid = wrs[i].WRID
		s.sgl = append(s.sgl[:0], wrs[i].SGL...)
		q.tail++
	}
	return len(wrs), nil
}

// Len returns the number of posted, unconsumed WQEs.
func (q *RecvQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return int(q.tail - q.head)
}

// SetLimit arms the SRQ limit event: fn is called once when a WQE is taken
// and fewer than limit remain (IBA 10.2.9.4, the SRQ limit asynchronous
// event). limit 0 disarms it.
func (q *RecvQueue) SetLimit(limit int, fn func()) {
	q.mu.Lock()
	q.limit, q.onLimit, q.disarmed = limit, fn, limit == 0
	q.mu.Unlock()
}

// pop takes the oldest WQE into w, copying its SGL into w's own slice.
func (q *RecvQueue) pop(w *recvWQE) bool {
	q.mu.Lock()
	if q.head == q.tail {
		q.mu.Unlock()
		return false
	}
	s := &q.ring[q.head%uint64(len(q.ring))]
	w.wrid = s.wrid
	w.sgl = append(w.sgl[:0], s.sgl...)
	q.head++
	var fire func()
	if !q.disarmed && q.limit > 0 && int(q.tail-q.head) < q.limit {
		fire, q.disarmed = q.onLimit, true
	}
	q.mu.Unlock()
	if fire != nil {
		fire()
	}
	return true
}

// drain removes every WQE, calling fn for each (flush on error uses it).
func (q *RecvQueue) drain(fn func(wrid uint64)) {
	q.mu.Lock()
	var ids []uint64
	for ; q.head != q.tail; q.head++ {
		ids = append(ids, q.ring[q.head%uint64(len(q.ring))].wrid)
	}
	q.mu.Unlock()
	for _, id := range ids {
		fn(id)
	}
}
