package link

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// memQueueLen is the number of packets in flight in each direction of a
// memory pair, about 1.1 MB of slots per direction.
const memQueueLen = 256

// NewMemPair returns two connected in-memory links with the given addresses,
// which must both be IPv4 or both IPv6 (it panics otherwise).
//
// Packets are copied into a queue slot on write and out of it on read, never
// shared. The ICRC is computed on write and checked on read exactly as two UDP
// links with these addresses would: IPv4 ID 0 and DF on the way out, ID
// recovery on the way in. A packet's destination must be the other end's
// address; anything else is refused with ErrUnknownPeer.
//
// Each direction holds up to 256 packets. When it is full, WriteBatch blocks,
// as a sender waits for room in a socket buffer, until the reader makes room
// or either end is closed. Closing one end makes its own calls return
// net.ErrClosed; the other end's writes then succeed and the packets are
// discarded, as datagrams to a closed port would be. No call blocks past a
// Close.
func NewMemPair(a, b netip.AddrPort) (Link, Link) {
	return NewMemPairFault(a, b, FaultConfig{}, FaultConfig{})
}

// NewMemPairFault is NewMemPair with fault injection: ab is what the first
// link does wrong to the packets it sends to the second, ba the reverse
// (see FaultConfig). Each link's Stats.Fault counts what it did to the
// packets it sent; a CE mark arrives as Packet.CE. It panics if a
// configuration is invalid (check with FaultConfig.Validate first).
func NewMemPairFault(a, b netip.AddrPort, ab, ba FaultConfig) (Link, Link) {
	a, b = plain(a), plain(b)
	if a.Addr().Is4() != b.Addr().Is4() {
		panic("link: NewMemPair: " + a.String() + " and " + b.String() + " are of different address families")
	}
	for _, c := range []FaultConfig{ab, ba} {
		if err := c.Validate(); err != nil {
			panic("link: NewMemPairFault: " + err.Error())
		}
	}
	qa, qb := newMemQueue(), newMemQueue() // packets to a, packets to b
	la := &memLink{addr: a, peer: b, rx: qa, tx: qb, fault: newFaultStage(ab), interrupt: make(chan struct{}, 1)}
	lb := &memLink{addr: b, peer: a, rx: qb, tx: qa, fault: newFaultStage(ba), interrupt: make(chan struct{}, 1)}
	la.fault.startRelease(la.flushHeld)
	lb.fault.startRelease(lb.flushHeld)
	return la, lb
}

// memSlot is one packet in flight.
type memSlot struct {
	buf  [MaxPacket]byte
	n    int
	from netip.AddrPort
	ce   bool // marked Congestion Experienced by the sender's fault stage
}

// memQueue carries packets to one end of a pair. Slots circulate between
// free and full; both channels can hold every slot, so returning a slot
// never blocks.
type memQueue struct {
	free, full chan *memSlot
	done       chan struct{} // closed when the receiving end closes
	closeOnce  sync.Once
}

func newMemQueue() *memQueue {
	q := &memQueue{
		free: make(chan *memSlot, memQueueLen),
		full: make(chan *memSlot, memQueueLen),
		done: make(chan struct{}),
	}
	slots := make([]memSlot, memQueueLen)
	for i := range slots {
		q.free <- &slots[i]
	}
	return q
}

// memLink is one end of a memory pair.
type memLink struct {
	addr, peer netip.AddrPort
	rx, tx     *memQueue // rx.done is closed by this end's Close
	stats      counters

	readMu, writeMu sync.Mutex    // serialize calls, as the UDP link does
	interrupt       chan struct{} // Interrupt's token for a waiting or the next ReadBatch

	fault *faultStage // nil: no faults
	fout  []faultOut  // the fault stage's output; guarded by writeMu

	// inFlight, if set (by tests, before use), sees each packet after its
	// ICRC is filled and may change it; it returns the packet to deliver,
	// which may be shorter but must stay within the slice it was given.
	inFlight func([]byte) []byte
}

func (l *memLink) LocalAddr() netip.AddrPort { return l.addr }

// Caps implements Link.Caps: a memory pair only moves packets.
func (l *memLink) Caps() Caps { return 0 }

// Segments implements Link.Segments: a memory pair sends packets one by one.
func (l *memLink) Segments(netip.AddrPort) bool { return false }

// ConnectPort implements Link.ConnectPort: a memory pair has no sockets.
func (l *memLink) ConnectPort(uint16, netip.AddrPort) {}

// ReadLent implements Link.ReadLent: a memory pair lends nothing, it
// copies.
func (l *memLink) ReadLent(pkts []Packet, wait bool) (int, error) { return l.read(pkts, wait) }

// ReturnLent implements Link.ReturnLent.
func (l *memLink) ReturnLent() {}

func (l *memLink) Interrupt() {
	select {
	case l.interrupt <- struct{}{}:
	default:
	}
}

func (l *memLink) Stats() Stats {
	s := l.stats.snapshot()
	if l.fault != nil {
		s.Fault = l.fault.stats.snapshot()
	}
	return s
}

func (l *memLink) Close() error {
	l.rx.closeOnce.Do(func() { close(l.rx.done) })
	if l.fault != nil {
		l.fault.stop()
	}
	return nil
}

func (l *memLink) closed() bool {
	select {
	case <-l.rx.done:
		return true
	default:
		return false
	}
}

func (l *memLink) WriteBatch(pkts []Packet) (int, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	var bytes uint64
	for i := range pkts {
		p := &pkts[i]
		flatten(p)
		if err := l.check(p); err != nil {
			l.stats.addTx(uint64(i), bytes, err)
			return i, err
		}
		src := l.addr
		if p.SrcPort != 0 {
			src = netip.AddrPortFrom(l.addr.Addr(), p.SrcPort)
		}
		f := sendFields(src, l.peer)
		putICRC(p.Buf, &f)
		bytes += uint64(len(p.Buf))

		ok := true
		if l.fault == nil {
			ok = l.put(p.Buf, src, false)
		} else {
			out := l.fault.admit(p.Buf, l.peer, src, i, l.fout[:0])
			k := l.putAll(out)
			l.fault.recycle(out, k)
			l.fout = out[:0]
			ok = k == len(out)
		}
		if !ok {
			l.stats.addTx(uint64(i), bytes-uint64(len(p.Buf)), net.ErrClosed)
			return i, net.ErrClosed
		}
	}
	l.stats.addTx(uint64(len(pkts)), bytes, nil)
	return len(pkts), nil
}

// put copies one packet into a slot of the peer's queue, waiting for a free
// slot. It returns false if this end is closed first.
func (l *memLink) put(b []byte, from netip.AddrPort, ce bool) bool {
	var s *memSlot
	select {
	case s = <-l.tx.free:
	case <-l.tx.done:
		return true // the peer is gone: the packet is lost on the way
	case <-l.rx.done:
		return false
	}
	s.n = copy(s.buf[:], b)
	s.from, s.ce = from, ce
	if l.inFlight != nil {
		s.n = len(l.inFlight(s.buf[:s.n]))
	}
	l.tx.full <- s
	return true
}

// putAll puts the fault stage's output and returns how many went.
func (l *memLink) putAll(out []faultOut) int {
	for i := range out {
		if !l.put(out[i].buf, out[i].src, out[i].ce) {
			return i
		}
	}
	return len(out)
}

// flushHeld sends the held packets that are due, for the fault stage's
// release goroutine, and returns the next deadline.
func (l *memLink) flushHeld() time.Time {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	out, next := l.fault.due(l.fout[:0])
	l.fault.recycle(out, l.putAll(out))
	l.fout = out[:0]
	return next
}

// check refuses what WriteBatch will not send.
func (l *memLink) check(p *Packet) error {
	switch {
	case l.closed():
		return net.ErrClosed
	case !p.sendable(false):
		return ErrPacketSize
	case plain(p.Peer) != l.peer:
		return ErrUnknownPeer
	}
	return nil
}

func (l *memLink) ReadBatch(pkts []Packet) (int, error) { return l.read(pkts, true) }

func (l *memLink) PollBatch(pkts []Packet) (int, error) { return l.read(pkts, false) }

// read is ReadBatch, or with wait false PollBatch.
func (l *memLink) read(pkts []Packet, wait bool) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	pkts = pkts[:min(len(pkts), MaxBatch)]
	if !wait {
		if !l.readMu.TryLock() {
			return 0, nil
		}
	} else {
		l.readMu.Lock()
	}
	defer l.readMu.Unlock()
	for {
		if l.closed() {
			return 0, net.ErrClosed
		}
		var s *memSlot
		if wait {
			select {
			case s = <-l.rx.full:
			case <-l.interrupt:
				return 0, nil
			case <-l.rx.done:
				return 0, net.ErrClosed
			}
		} else {
			select {
			case s = <-l.rx.full:
			default:
				return 0, nil
			}
		}
		var c rxCount
		n := 0
		for {
			if l.deliver(&pkts[n], s, &c) {
				n++
			}
			l.rx.free <- s
			if n == len(pkts) {
				break
			}
			select {
			case s = <-l.rx.full:
				continue
			default:
			}
			break
		}
		l.stats.addRx(&c)
		if n > 0 {
			return n, nil
		}
	}
}

// deliver checks the packet in s and copies it into p if it is good.
func (l *memLink) deliver(p *Packet, s *memSlot, c *rxCount) bool {
	pkt := s.buf[:s.n]
	switch {
	case len(pkt) < minPacket:
		c.malformed++
		return false
	case len(pkt) > cap(p.Buf):
		c.oversized++
		return false
	case !checkICRC(s.from, l.addr, pkt, nil):
		c.icrc++
		return false
	}
	p.Buf = p.Buf[:len(pkt)]
	copy(p.Buf, pkt)
	p.Peer = s.from
	p.SrcPort, p.Lent, p.ICRCPending = 0, nil, false
	p.CE = s.ce
	c.packets++
	c.bytes += uint64(len(pkt))
	return true
}
