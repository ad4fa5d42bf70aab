// Package device is the engine of a goroce device, the part of an RDMA NIC
// between its wire and its verbs: it reads packets from the link and
// routes them by destination QP (multicast to every attached QP), runs
// each QP's transport on the worker that owns it, keeps the QPs' timers,
// schedules their writes to the link, and hands the link over to a
// goroutine that busy-polls. It is Linux rxe's rxe_task.c and rxe_recv.c;
// package verbs holds the objects and checks of the API above it, and
// package transport the protocol each QP runs.
//
// The engine's goroutines:
//
//	routineRead    link.ReadLent → demux (demux.go): by destination QPN to
//	               the worker that owns the QP (QPN modulo the number of
//	               workers); run at once on this goroutine where the worker is
//	               idle, queued to it otherwise. It steps off the link while a
//	               goroutine busy-polls (poll.go) and ends when the link closes.
//	routineGroup   one per multicast group the device's QPs are attached to
//	   ×M          (groups.go): each packet to QPN 0xFFFFFF is copied to every
//	               attached QP's worker; it ends when the group's link closes
//	routineWork    owns its QPs' transport state (worker.go): runs Receive,
//	   ×N          Progress and Timeout, and writes what they emit with
//	               link.WriteBatch on the schedule of txsched.go; it ends on
//	               Close
//
// A worker's QPs belong to whoever holds the worker's lock: its own
// goroutine, or a goroutine that finds it idle and runs the work inline
// (the reader with a small batch, a busy poller, a posting goroutine),
// which saves the wake-up of a goroutine per message (rxe_run_task against
// rxe_sched_task). Users' goroutines post work requests into locked queues
// and kick the worker; modify and destroy run as calls on the worker.
// Close closes the links, which ends the readers, and stops the workers;
// nothing waits for a peer.
package device

import (
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/fault"
	"github.com/goroce/goroce/internal/link/shm"
	"github.com/goroce/goroce/internal/link/udp"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/transport"
)

// Config describes an engine. Addr is required; the zero value of every
// other field works.
type Config struct {
	// Addr is the device's address and UDP port.
	Addr netip.AddrPort
	// Link, when set, carries the device's packets instead of a UDP
	// socket on Addr (tests use in-memory links). Multicast needs the
	// UDP socket.
	Link link.Link
	// Fault is the fault injection of the UDP socket; the zero value
	// injects nothing.
	Fault fault.Config
	// SameHost moves packets to goroce devices of this user and network
	// namespace through shared memory (link/shm). It excludes Fault.
	SameHost bool
	// NetNS is the network namespace of the sockets; nil: the process's.
	NetNS *netns.NS
	// WholeWrites sends every RC RDMA WRITE as one message, never split
	// into WRITE_ONLY packets for the link's segmentation
	// (transport.Path.SplitWrites).
	WholeWrites bool
	// Workers is the number of worker goroutines; 0 means up to 4,
	// bounded by GOMAXPROCS.
	Workers int
	// MaxQP is the most QPs the engine holds at once; 0 means no limit
	// below the QPN space.
	MaxQP int
	// Stats are the device's counters; nil counts into counters of the
	// engine's own.
	Stats *stats.Counters
	// Placement is the device's policy for storing RDMA WRITE payload
	// around the cache; nil stores it the ordinary way.
	Placement *transport.Placement
}

// The RC send window and budget (docs/design/tuning.md#send-window-and-budget).
//
// The window is how many PSNs a requester may send ahead of the oldest
// unacknowledged one: rxe allows 128, which at MTU 4096 is 512 KiB in
// flight, too little for one QP to fill loopback, where a WRITE's ACK comes
// back behind the next several messages.
//
// The windows of all the QPs that send at once add up in the peer's socket
// buffer or same-host ring, and what overflows it is dropped, after which
// each QP that lost its last packets waits a whole ACK timeout. So the QPs
// of a device also share a budget of sendBudget PSNs in flight
// (transport.Budget), split among its workers: 4 MiB at MTU 4096, what a
// peer's default 4 MiB socket buffer takes. A worker's share is at least a
// grant's worth, so a device with more than four workers has that many
// grants in flight at most. The same-host ring holds a budget's worth of
// packets and more (link: shmSlots); TestRingHoldsBudget checks it.
const (
	sendWindow = 512
	sendBudget = 1024
)

// Engine is a device's engine: its link, readers, workers and QP table.
type Engine struct {
	cfg       Config
	link      link.Link
	dst       netip.Addr // the destination of the unicast packets the link reads
	stats     *stats.Counters
	placement *transport.Placement
	workers   []*worker

	caps link.Caps // what the link declared when it opened (CapCheapWrite is asked anew)

	// deferredICRC counts packets whose ICRC the link left to the
	// engine (link.CapDeferICRC) and that turned out wrong; the device's
	// icrc_errors adds them to the link's.
	deferredICRC atomic.Uint64

	readerDone chan struct{}
	closing    chan struct{} // closed by Close: a parked reader ends
	closeOnce  sync.Once
	closeErr   error

	qps qps     // QPN allocation, under its lock
	tab qpTable // QPN → *QP for the readers, without a lock

	groups groups // multicast groups and their readers

	poll poller // busy polling (poll.go)
}

// qps hands out QPNs.
type qps struct {
	sync.Mutex
	n    int    // QPs held
	last uint32 // the last QPN handed out
}

// ErrTooManyQPs is returned by NewQP when the engine holds Config.MaxQP.
var ErrTooManyQPs = errors.New("device: too many QPs")

// Open opens the device's link, unless cfg.Link is set, and starts the
// engine's goroutines.
func Open(cfg Config) (*Engine, error) {
	e := &Engine{cfg: cfg, link: cfg.Link, dst: cfg.Addr.Addr(), stats: cfg.Stats, placement: cfg.Placement,
		readerDone: make(chan struct{}), closing: make(chan struct{})}
	if e.stats == nil {
		e.stats = stats.New()
	}
	e.qps.last = 0x10 // rxe hands out data QPNs from 0x11
	if e.link == nil {
		l, err := openUDP(cfg)
		if err != nil {
			return nil, err
		}
		e.link = l
	}
	e.caps = e.link.Caps()
	if cfg.WholeWrites {
		e.caps &^= link.CapSegment
	}
	e.poll.init()
	n := cfg.Workers
	if n <= 0 {
		n = min(runtime.GOMAXPROCS(0), 4)
	}
	for range n {
		w := newWorker(e, sendBudget/n)
		e.workers = append(e.workers, w)
		go w.routineWork()
	}
	go e.routineRead()
	return e, nil
}

// openUDP opens the device's link: a UDP socket, with a fault stage in
// front of it (link/fault) or the same-host path (link/shm) if asked.
func openUDP(cfg Config) (link.Link, error) {
	faulty := cfg.Fault.Active()
	if faulty && cfg.SameHost {
		return nil, errors.New("the same-host path and fault injection exclude each other (faults simulate a network)")
	}
	if err := cfg.Fault.Validate(); err != nil {
		return nil, err
	}
	u, err := udp.Listen(udp.Config{Addr: cfg.Addr, PlainSend: faulty, NetNS: cfg.NetNS})
	if err != nil {
		return nil, err
	}
	switch {
	case faulty:
		l, err := fault.Wrap(u, cfg.Fault)
		if err != nil {
			u.Close()
			return nil, err
		}
		return l, nil
	case cfg.SameHost:
		// The transport checks a ring packet's ICRC while it places the
		// payload (wire.Packet.CopyPayload), and all others before it
		// acts on them.
		m, err := shm.New(u, shm.Config{Dir: stats.Dir(), NetNS: cfg.NetNS, DeferICRC: true})
		if err != nil {
			u.Close()
			return nil, err
		}
		return m, nil
	}
	return u, nil
}

// Link returns the engine's link.
func (e *Engine) Link() link.Link { return e.link }

// Placement returns the engine's placement policy (Config.Placement).
func (e *Engine) Placement() *transport.Placement { return e.placement }

// Close stops the engine: the group links and the device's link close,
// which ends their readers, and the workers stop. It returns the error of
// closing the device's link; later calls return the same.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.groups.closeAll()
		e.closeErr = e.link.Close()
		close(e.closing)
		<-e.readerDone
		for _, w := range e.workers {
			close(w.quit)
			<-w.exited
		}
	})
	return e.closeErr
}

// workerFor returns the worker that owns QP qpn.
func (e *Engine) workerFor(qpn uint32) *worker { return e.workers[qpn%uint32(len(e.workers))] }

// routineRead is the reader goroutine of the device's link.
func (e *Engine) routineRead() {
	defer close(e.readerDone)
	e.readLink(e.link, netip.Addr{})
}

// splitWrites reports whether QPs sending to peer split their RC RDMA
// WRITEs into WRITE_ONLY packets (transport.Path.SplitWrites): the link
// sends runs of one size to peer as one datagram.
func (e *Engine) splitWrites(peer netip.AddrPort) bool {
	return e.caps&link.CapSegment != 0 && e.link.Segments(peer)
}

// eagerLink reports whether the link writes cheaply enough for eagerBatch:
// it has same-host channels open.
func (e *Engine) eagerLink() bool { return e.link.Caps()&link.CapCheapWrite != 0 }

// Settle waits until every worker has finished what it was doing, a
// memory barrier between the caller and the workers: the caller may then
// read memory that peers wrote through the device, and the workers see
// what the caller wrote before. Programs get the same ordering from
// completions and posts; tests use Settle.
func (e *Engine) Settle() {
	for _, w := range e.workers {
		// The call's done is closed before the worker's turn runs the
		// QPs that events taken in the same turn (a post's kick) made
		// dirty: run them inside the call.
		w.call(w.runDirty)
	}
}

// Budgets returns, for each worker, the PSNs of its send budget that no
// QP holds and the budget's size, read on the worker.
func (e *Engine) Budgets() (free, size []int) {
	for _, w := range e.workers {
		w.call(func() {
			free = append(free, w.budget.Available())
			size = append(size, w.budget.Size())
		})
	}
	return free, size
}
