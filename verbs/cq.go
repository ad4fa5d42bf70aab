package verbs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// CQ is a completion queue (IBA 11.4.2). Completions are taken with Poll;
// ReqNotify arms a one-shot notification on the CQ's completion channel.
type CQ struct {
	dev *Device
	ch  *CompChannel

	// ready is tail − head, readable without mu: a goroutine that spins
	// on an empty CQ (Poll, Len) takes no lock, so it does not slow down
	// the worker pushing completions.
	ready atomic.Int64

	mu            sync.Mutex
	ring          []WC
	head, tail    uint64
	armed         bool
	solicitedOnly bool
	overrun       bool
}

// CreateCQ creates a completion queue holding up to cqe completions.
// Notifications go to ch, which may be nil.
func (d *Device) CreateCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if cqe < 1 || cqe > maxCQE {
		return nil, fmt.Errorf("verbs: %s: CQ size %d outside 1..%d", d.name, cqe, maxCQE)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if d.objs.cqs >= maxCQ {
		return nil, fmt.Errorf("verbs: %s: more than %d CQs", d.name, maxCQ)
	}
	d.objs.cqs++
	return &CQ{dev: d, ch: ch, ring: make([]WC, cqe)}, nil
}

// Poll moves up to len(wc) completions into wc, oldest first, and returns
// how many. It never blocks.
func (cq *CQ) Poll(wc []WC) int {
	if cq.ready.Load() == 0 {
		return 0
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	n := 0
	for n < len(wc) && cq.head != cq.tail {
		wc[n] = cq.ring[cq.head%uint64(len(cq.ring))]
		cq.head++
		n++
	}
	cq.ready.Add(int64(-n))
	return n
}

// ReqNotify arms the CQ: the next completion (with solicitedOnly, the next
// completion of a solicited message or with an error status) sends one
// event to the CQ's completion channel (ibv_req_notify_cq).
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.ch == nil {
		return fmt.Errorf("verbs: ReqNotify on a CQ without a completion channel")
	}
	cq.mu.Lock()
	cq.armed, cq.solicitedOnly = true, solicitedOnly
	cq.mu.Unlock()
	return nil
}

// cqSink is the transport's view of a CQ (transport.CQ).
type cqSink struct{ cq *CQ }

// Push implements transport.CQ.
func (s cqSink) Push(wc WC, solicited bool) { s.cq.push(wc, solicited) }

// push appends a completion; the engine's workers call it. A full CQ
// loses the completion and reports a CQ error event (IBA 11.4.2.1,
// overrun).
func (cq *CQ) push(wc WC, solicited bool) {
	cq.mu.Lock()
	if cq.tail-cq.head == uint64(len(cq.ring)) {
		first := !cq.overrun
		cq.overrun = true
		cq.mu.Unlock()
		if first {
			cq.dev.event(AsyncEvent{Type: EventCQErr, CQ: cq})
		}
		return
	}
	cq.ring[cq.tail%uint64(len(cq.ring))] = wc
	cq.tail++
	cq.ready.Add(1)
	notify := cq.armed && (!cq.solicitedOnly || solicited || wc.Status != WCSuccess)
	if notify {
		cq.armed = false
	}
	cq.mu.Unlock()
	if notify {
		cq.ch.post(cq)
	}
}

// Len returns the number of completions waiting to be polled.
func (cq *CQ) Len() int { return int(cq.ready.Load()) }

// Destroy releases the CQ.
func (cq *CQ) Destroy() error {
	cq.dev.mu.Lock()
	cq.dev.objs.cqs--
	cq.dev.mu.Unlock()
	return nil
}

// CompChannel delivers CQ notifications (ibv_comp_channel). Use Get, or
// wait on C in a select and then call Get.
type CompChannel struct {
	mu     sync.Mutex
	queue  []*CQ
	notify chan struct{}
}

// NewCompChannel creates a completion channel.
func NewCompChannel() *CompChannel { return &CompChannel{notify: make(chan struct{}, 1)} }

// C is ready to receive when an event may be waiting for Get.
func (c *CompChannel) C() <-chan struct{} { return c.notify }

func (c *CompChannel) post(cq *CQ) {
	c.mu.Lock()
	c.queue = append(c.queue, cq)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// TryGet returns the next notified CQ, or nil if there is none.
func (c *CompChannel) TryGet() *CQ {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		return nil
	}
	cq := c.queue[0]
	c.queue = c.queue[:copy(c.queue, c.queue[1:])]
	if len(c.queue) > 0 {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
	return cq
}

// Get waits for the next notified CQ (ibv_get_cq_event) or for ctx to end.
func (c *CompChannel) Get(ctx context.Context) (*CQ, error) {
	for {
		if cq := c.TryGet(); cq != nil {
			return cq, nil
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// EventType is an asynchronous event's type (enum ibv_event_type).
type EventType uint8

const (
	EventCQErr           EventType = 0
	EventQPFatal         EventType = 1
	EventQPReqErr        EventType = 2
	EventQPAccessErr     EventType = 3
	EventSRQLimitReached EventType = 15
)

func (t EventType) String() string {
	switch t {
	case EventCQErr:
		return "CQ_ERR"
	case EventQPFatal:
		return "QP_FATAL"
	case EventQPReqErr:
		return "QP_REQ_ERR"
	case EventQPAccessErr:
		return "QP_ACCESS_ERR"
	case EventSRQLimitReached:
		return "SRQ_LIMIT_REACHED"
	}
	return fmt.Sprintf("EVENT_%d", uint8(t))
}

// AsyncEvent is an asynchronous event (struct ibv_async_event).
type AsyncEvent struct {
	Type EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
}

// Events returns the device's asynchronous events (ibv_get_async_event).
// The channel is closed when the device closes. Events that find it full
// are dropped.
func (d *Device) Events() <-chan AsyncEvent { return d.events }

func (d *Device) event(ev AsyncEvent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	select {
	case d.events <- ev:
	default:
	}
}
