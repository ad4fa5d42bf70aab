//go:build linux

package shm

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/prefetch"
	"github.com/goroce/goroce/internal/wire"
)

// shmOut is a channel this link sends on.
type shmOut struct {
	peer     netip.AddrPort
	ring     *shmRing // nil: no channel, send over UDP
	doorbell int
	conn     *net.UnixConn
	tail     uint64        // the next slot to fill (the producer's own copy)
	head     uint64        // the consumer's index as last read: slots before it are free
	retryAt  monotime.Time // no channel: when to dial again
	width    slotWidth     // how much of the slots ahead send asks for
}

// shmIn is a channel this link receives on.
type shmIn struct {
	peer     netip.Addr // the producer's link's address
	ring     *shmRing
	doorbell int
	head     uint64 // consumed and returned
	lent     uint64 // taken by the read in progress, returned by release
	dead     atomic.Bool
}

// send puts the packets (checked, sent from laddr or their SrcPort) into
// o's ring and returns how many went in; the rest did not fit. Each packet
// is copied into its slot and its ICRC computed in the same pass
// (wire.IPFields.ICRCCopy), a gathered payload (Packet.Payload) taken
// from where it lies; the ICRC goes into the slot only, Buf keeps its
// room for it unfilled. The CRC of the headers ahead of the BTH comes
// from hdr (Mux.txHdr), as the UDP link takes it for its own packets,
// rather than computed per packet. s.writeMu is held.
func (o *shmOut) send(pkts []link.Packet, laddr netip.AddrPort, hdr *wire.HeaderCache) int {
	r := o.ring
	n := 0
	wide, timed := o.width.next()
	limit := shmPrefetchLines
	if wide {
		limit = shmSlotSize / prefetch.LineSize
	}
	var start monotime.Time
	if timed {
		start = monotime.Now()
	}
	large := int64(0) // bytes of packets of widthLargePacket or more, for o.width
	for ; n < len(pkts); n++ {
		// The consumer's index is read again only when the ring looks
		// full: the consumer writes it after every batch, and a read of
		// it per send would move its cache line between the cores every
		// time (a single-producer ring's cached index).
		if o.tail-o.head >= shmSlots {
			if o.head = r.u64(shmOffHead).Load(); o.tail-o.head >= shmSlots {
				break
			}
		}
		p := &pkts[n]
		slot := r.slot(o.tail)
		size := p.Size()
		binary.LittleEndian.PutUint32(slot, uint32(size))
		sport := p.SrcPort
		if sport == 0 {
			sport = laddr.Port()
		}
		binary.LittleEndian.PutUint16(slot[4:], sport)
		f := link.SendFields(netip.AddrPortFrom(laddr.Addr(), sport), o.peer)
		f.Cache = hdr
		pkt := slot[shmSlotHdr : shmSlotHdr+size]
		split := p.Split // headers, then the payload from where it lies, then pad
		if p.Payload == nil {
			split = len(p.Buf) - wire.ICRCLen // the whole packet in Buf
		}
		tail := p.Buf[split : len(p.Buf)-wire.ICRCLen]
		wire.PutICRC(pkt, f.ICRCCopy(pkt[:size-wire.ICRCLen], p.Buf[:split], p.Payload, tail))
		o.tail++
		if size >= widthLargePacket {
			large += int64(size)
		}
		if o.tail+shmPrefetchAhead-o.head < shmSlots { // not a slot the consumer may still read
			prefetchSlot(r.slot(o.tail+shmPrefetchAhead), size, true, limit)
		}
	}
	if n > 0 {
		r.u64(shmOffTail).Store(o.tail) // an exchange: the slots' stores are done when it is
		var ns int64
		if timed {
			ns = int64(monotime.Since(start))
		}
		o.width.note(wide, timed, ns, large)
		if r.u32(shmOffWaiting).Load() != 0 && r.u32(shmOffWaiting).CompareAndSwap(1, 0) {
			signal(o.doorbell)
		}
	}
	return n
}

// alive reports whether the consumer still reads o's ring; s.writeMu is
// held. It costs a system call only when the ring is full.
func (o *shmOut) alive(full bool) bool {
	if o.ring.u32(shmOffClosed).Load() != 0 {
		return false
	}
	if !full {
		return true
	}
	raw, err := o.conn.SyscallConn()
	if err != nil {
		return false
	}
	eof := false
	raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_DONTWAIT|unix.MSG_PEEK)
		eof = n == 0 && err == nil
		return true
	})
	return !eof
}

// drop ends a channel this link sent on; s.writeMu is held.
func (s *Mux) drop(o *shmOut) {
	s.open.Add(-1)
	if s.last == o {
		s.last = nil
	}
	o.drop()
}

func (o *shmOut) drop() {
	o.ring.unmap()
	unix.Close(o.doorbell)
	o.conn.Close()
	*o = shmOut{peer: o.peer, retryAt: monotime.Now().Add(shmRetry)}
}

// take moves the channels the listener accepted to s.in; s.readMu is held.
func (s *Mux) take() {
	if !s.pending.Load() {
		return
	}
	s.mu.Lock()
	s.in = append(s.in, s.added...)
	clear(s.added)
	s.added = s.added[:0]
	s.pending.Store(false)
	s.mu.Unlock()
}

// woken is the reader's wake check (sockSet.wake), run each time the
// reader's wait is woken: it empties the doorbells and the link's own
// eventfd, sets the consumers' "waiting" flags again and reports ready.
//
// Setting the flags again is what keeps a consumer from sleeping for good.
// A producer that saw a flag set in one wait may clear it (and ring) only
// after the consumer has woken for another reason, read the ring empty and
// gone to wait again, flag set: that ring wakes the new wait for nothing,
// and a consumer that then slept on with its flag cleared would never be
// rung again (about one two-process run in five of 960,000 packets
// stalled that way until the transport gave up).
func (s *Mux) woken() bool {
	var b [8]byte
	unix.Read(s.wake, b[:])
	for _, in := range s.in {
		if in.doorbell >= 0 {
			unix.Read(in.doorbell, b[:])
		}
	}
	s.setWaiting(true)
	return s.ready()
}

// ready reports whether a ring has packets or a channel has ended.
func (s *Mux) ready() bool {
	if s.pending.Load() {
		return true
	}
	for _, in := range s.in {
		if in.dead.Load() || in.ring.u64(shmOffTail).Load() != in.head+in.lent {
			return true
		}
	}
	return false
}

// setWaiting sets or clears the consumers' flags; s.readMu is held.
func (s *Mux) setWaiting(on bool) {
	v := uint32(0)
	if on {
		v = 1
	}
	for _, in := range s.in {
		in.ring.u32(shmOffWaiting).Store(v)
	}
}

// readRings fills pkts from the rings, lending the slots with lend (copying
// them into Buf otherwise), and returns how many; s.readMu is held.
func (s *Mux) readRings(pkts []link.Packet, lend bool) int {
	s.take()
	n := 0
	var c link.RxCount
	deferICRC := lend && s.deferICRC
	for k := range s.in {
		if n == len(pkts) {
			break
		}
		in := s.in[(s.next+k)%len(s.in)]
		r := in.ring
		tail := r.u64(shmOffTail).Load()
		at := in.head + in.lent
		if tail-at > shmSlots { // a producer that moved backwards or too far
			in.dead.Store(true)
			continue
		}
		for ; at != tail && n < len(pkts); at++ {
			in.lent++
			slot := r.slot(at)
			size := int(binary.LittleEndian.Uint32(slot))
			if size < link.MinPacket || size > link.MaxPacket {
				c.Malformed++
				continue
			}
			if tail-at > shmPrefetchAhead {
				prefetchSlot(r.slot(at+shmPrefetchAhead), size, false, shmPrefetchLines)
			}
			sport := binary.LittleEndian.Uint16(slot[4:])
			src := netip.AddrPortFrom(in.peer, sport)
			pkt := slot[shmSlotHdr : shmSlotHdr+size : shmSlotHdr+size]
			p := &pkts[n]
			if !lend {
				if size > cap(p.Buf) {
					c.Oversized++
					continue
				}
				p.Buf = p.Buf[:size]
				copy(p.Buf, pkt)
				pkt = p.Buf
			}
			p.ICRCPending = false
			if deferICRC {
				// The borrower checks it (link.CapDeferICRC), in the pass
				// that places the payload.
				f := link.SendFields(src, s.laddr)
				f.Cache = &s.rxHdr
				p.ICRCPending, p.ICRCSeed = true, f.HeaderCRC(pkt[:size-wire.ICRCLen])
			} else if !link.CheckICRC(src, s.laddr, pkt, &s.rxHdr) {
				c.ICRC++
				continue
			}
			p.Lent = nil
			if lend {
				p.Lent = pkt
			}
			p.Peer, p.CE, p.SrcPort = src, false, 0
			c.Packets++
			c.Bytes += uint64(size)
			n++
		}
	}
	s.next++
	c.AddTo(s.stats)
	if !lend {
		s.release()
	}
	s.retire()
	return n
}

// release gives the slots the last read took back to their producers;
// s.readMu is held.
func (s *Mux) release() {
	for _, in := range s.in {
		if in.lent > 0 {
			in.head += in.lent
			in.lent = 0
			in.ring.u64(shmOffHead).Store(in.head)
		}
	}
}

// retire ends the channels whose producer went away, once nothing of
// theirs is lent; s.readMu is held.
func (s *Mux) retire() {
	kept := s.in[:0]
	for _, in := range s.in {
		if in.dead.Load() && in.lent == 0 {
			s.closeIn(in)
			continue
		}
		kept = append(kept, in)
	}
	clear(s.in[len(kept):])
	s.in = kept
}

func (s *Mux) closeIn(in *shmIn) {
	in.ring.u32(shmOffClosed).Store(1)
	if in.doorbell >= 0 {
		s.inner.Unwatch(in.doorbell)
		unix.Close(in.doorbell)
	}
	in.ring.unmap()
}

// signal rings eventfd efd.
func signal(efd int) {
	one := [8]byte{1}
	unix.Write(efd, one[:])
}
