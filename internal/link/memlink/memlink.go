// Package memlink is an in-memory pair of links, for tests: two devices of
// one process joined without sockets, wire-compatible with two UDP links
// (wireguard-go's conn/bindtest plays the same part).
package memlink

import (
	"net"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/stats"
)

// queueLen is the number of packets in flight in each direction of a pair,
// about 1.1 MB of slots per direction.
const queueLen = 256

// NewPair returns two connected in-memory links with the given addresses,
// which must both be IPv4 or both IPv6 (it panics otherwise).
//
// Packets are copied into a queue slot on write and out of it on read, never
// shared. The ICRC is computed on write and checked on read exactly as two UDP
// links with these addresses would: IPv4 ID 0 and DF on the way out, ID
// recovery on the way in. A packet's destination must be the other end's
// address; anything else is refused with link.ErrUnknownPeer.
//
// Each direction holds up to 256 packets. When it is full, WriteBatch blocks,
// as a sender waits for room in a socket buffer, until the reader makes room
// or either end is closed. Closing one end makes its own calls return
// net.ErrClosed; the other end's writes then succeed and the packets are
// discarded, as datagrams to a closed port would be. No call blocks past a
// Close.
//
// Both ends are link.Sealers: a fault stage (link/fault) may stand in front
// of either.
func NewPair(a, b netip.AddrPort) (*Link, *Link) {
	a, b = link.Plain(a), link.Plain(b)
	if a.Addr().Is4() != b.Addr().Is4() {
		panic("memlink: NewPair: " + a.String() + " and " + b.String() + " are of different address families")
	}
	qa, qb := newQueue(), newQueue() // packets to a, packets to b
	la := &Link{addr: a, peer: b, rx: qa, tx: qb, stats: stats.New(), interrupt: make(chan struct{}, 1)}
	lb := &Link{addr: b, peer: a, rx: qb, tx: qa, stats: stats.New(), interrupt: make(chan struct{}, 1)}
	return la, lb
}

// slot is one packet in flight.
type slot struct {
	buf  [link.MaxPacket]byte
	n    int
	from netip.AddrPort
	ce   bool // marked Congestion Experienced by the sender (a fault stage)
}

// queue carries packets to one end of a pair. Slots circulate between free
// and full; both channels can hold every slot, so returning a slot never
// blocks.
type queue struct {
	free, full chan *slot
	done       chan struct{} // closed when the receiving end closes
	closeOnce  sync.Once
}

func newQueue() *queue {
	q := &queue{
		free: make(chan *slot, queueLen),
		full: make(chan *slot, queueLen),
		done: make(chan struct{}),
	}
	slots := make([]slot, queueLen)
	for i := range slots {
		q.free <- &slots[i]
	}
	return q
}

// Link is one end of a memory pair.
type Link struct {
	addr, peer netip.AddrPort
	rx, tx     *queue // rx.done is closed by this end's Close
	stats      *stats.Counters

	readMu, writeMu sync.Mutex    // serialize calls, as the UDP link does
	interrupt       chan struct{} // Interrupt's token for a waiting or the next ReadBatch

	// inFlight, if set (by tests, before use), sees each packet after its
	// ICRC is filled and may change it; it returns the packet to deliver,
	// which may be shorter but must stay within the slice it was given.
	inFlight func([]byte) []byte
}

var _ link.Sealer = (*Link)(nil)

func (l *Link) LocalAddr() netip.AddrPort { return l.addr }

// Caps implements link.Link.Caps: a memory pair only moves packets.
func (l *Link) Caps() link.Caps { return 0 }

// Segments implements link.Link.Segments: a memory pair sends packets one by one.
func (l *Link) Segments(netip.AddrPort) bool { return false }

// ConnectPort implements link.Link.ConnectPort: a memory pair has no sockets.
func (l *Link) ConnectPort(uint16, netip.AddrPort) {}

// ReadLent implements link.Link.ReadLent: a memory pair lends nothing, it
// copies.
func (l *Link) ReadLent(pkts []link.Packet, wait bool) (int, error) { return l.read(pkts, wait) }

// ReturnLent implements link.Link.ReturnLent.
func (l *Link) ReturnLent() {}

func (l *Link) Interrupt() {
	select {
	case l.interrupt <- struct{}{}:
	default:
	}
}

func (l *Link) Stats() link.Stats { return l.stats.Snapshot() }

func (l *Link) Close() error {
	l.rx.closeOnce.Do(func() { close(l.rx.done) })
	return nil
}

func (l *Link) closed() bool {
	select {
	case <-l.rx.done:
		return true
	default:
		return false
	}
}

func (l *Link) WriteBatch(pkts []link.Packet) (int, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	var bytes uint64
	for i := range pkts {
		p := &pkts[i]
		src, err := l.seal(p)
		if err != nil {
			link.CountTx(l.stats, uint64(i), bytes, err)
			return i, err
		}
		bytes += uint64(len(p.Buf))
		if !l.put(p.Buf, src, false) {
			link.CountTx(l.stats, uint64(i), bytes-uint64(len(p.Buf)), net.ErrClosed)
			return i, net.ErrClosed
		}
	}
	link.CountTx(l.stats, uint64(len(pkts)), bytes, nil)
	return len(pkts), nil
}

// Seal implements link.Sealer.
func (l *Link) Seal(p *link.Packet) (netip.AddrPort, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	return l.seal(p)
}

// seal is Seal with writeMu held.
func (l *Link) seal(p *link.Packet) (netip.AddrPort, error) {
	p.Flatten()
	if err := l.check(p); err != nil {
		return netip.AddrPort{}, err
	}
	src := l.addr
	if p.SrcPort != 0 {
		src = netip.AddrPortFrom(l.addr.Addr(), p.SrcPort)
	}
	f := link.SendFields(src, l.peer)
	link.PutICRC(p.Buf, &f)
	return src, nil
}

// WriteSealed implements link.Sealer: each packet goes to the peer as it
// is, a CE mark with it.
func (l *Link) WriteSealed(pkts []link.Sealed) (int, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	for i := range pkts {
		if !l.put(pkts[i].Buf, pkts[i].Src, pkts[i].CE) {
			return i, net.ErrClosed
		}
	}
	return len(pkts), nil
}

// put copies one packet into a slot of the peer's queue, waiting for a free
// slot. It returns false if this end is closed first.
func (l *Link) put(b []byte, from netip.AddrPort, ce bool) bool {
	var s *slot
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

// check refuses what WriteBatch will not send.
func (l *Link) check(p *link.Packet) error {
	switch {
	case l.closed():
		return net.ErrClosed
	case !p.Sendable(false):
		return link.ErrPacketSize
	case link.Plain(p.Peer) != l.peer:
		return link.ErrUnknownPeer
	}
	return nil
}

func (l *Link) ReadBatch(pkts []link.Packet) (int, error) { return l.read(pkts, true) }

func (l *Link) PollBatch(pkts []link.Packet) (int, error) { return l.read(pkts, false) }

// read is ReadBatch, or with wait false PollBatch.
func (l *Link) read(pkts []link.Packet, wait bool) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	pkts = pkts[:min(len(pkts), link.MaxBatch)]
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
		var s *slot
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
		var c link.RxCount
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
		c.AddTo(l.stats)
		if n > 0 {
			return n, nil
		}
	}
}

// deliver checks the packet in s and copies it into p if it is good.
func (l *Link) deliver(p *link.Packet, s *slot, c *link.RxCount) bool {
	pkt := s.buf[:s.n]
	switch {
	case len(pkt) < link.MinPacket:
		c.Malformed++
		return false
	case len(pkt) > cap(p.Buf):
		c.Oversized++
		return false
	case !link.CheckICRC(s.from, l.addr, pkt, nil):
		c.ICRC++
		return false
	}
	p.Buf = p.Buf[:len(pkt)]
	copy(p.Buf, pkt)
	p.Peer = s.from
	p.SrcPort, p.Lent, p.ICRCPending = 0, nil, false
	p.CE = s.ce
	c.Packets++
	c.Bytes += uint64(len(pkt))
	return true
}
