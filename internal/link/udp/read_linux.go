//go:build linux

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/stats"
)

// ReadBatch implements link.Link.ReadBatch.
func (u *Link) ReadBatch(pkts []link.Packet) (int, error) { return u.read(pkts, true) }

// PollBatch implements link.Link.PollBatch.
func (u *Link) PollBatch(pkts []link.Packet) (int, error) { return u.read(pkts, false) }

// read is ReadBatch, or with wait false PollBatch.
func (u *Link) read(pkts []link.Packet, wait bool) (int, error) {
	n, err := u.readHeld(pkts, wait, false)
	if n > 0 {
		u.ReturnLent() // nothing was lent: the read lock goes
	}
	return n, err
}

// ReadLent implements link.Link.ReadLent: with UDP_GRO, packets are lent from
// the super-packets the kernel wrote into the link's buffers.
func (u *Link) ReadLent(pkts []link.Packet, wait bool) (int, error) {
	return u.readHeld(pkts, wait, true)
}

// ReturnLent implements link.Link.ReturnLent.
func (u *Link) ReturnLent() { u.rd.Unlock() }

// readHeld reads a batch under readMu (lending GRO packets with lend) and
// returns with readMu still held when it returns packets; without wait it
// returns 0 when another read holds readMu.
func (u *Link) readHeld(pkts []link.Packet, wait, lend bool) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	pkts = pkts[:min(len(pkts), link.MaxBatch)]
	if !u.lockRead(wait) {
		return 0, nil
	}
	n, err := u.readSocket(pkts, wait, lend)
	if n == 0 || err != nil {
		u.rd.Unlock()
	}
	return n, err
}

// lockRead takes readMu; without wait, only if it is free.
func (u *Link) lockRead(wait bool) bool {
	if !wait {
		return u.rd.TryLock()
	}
	u.rd.Lock()
	return true
}

// readSocket reads from the socket; u.rd is held.
func (u *Link) readSocket(pkts []link.Packet, wait, lend bool) (int, error) {
	if u.rd.gro != nil {
		return u.readGRO(pkts, wait, lend)
	}
	m := u.rd.m
	for i := range pkts {
		m.setBuf(i, pkts[i].Buf[:cap(pkts[i].Buf)])
	}
	defer m.clearBufs(len(pkts))
	for {
		k, err := u.recv(len(pkts), wait)
		if k == 0 || err != nil { // without wait, or interrupted
			return 0, err
		}
		c := rxTally{flow: u.rd.fromFlow, datagrams: uint64(k)}
		n := 0
		for i := range k {
			if !u.accept(m, i, &pkts[i], &c) {
				continue
			}
			if n != i { // move the good packet to the front, its buffer with it
				pkts[n].Buf, pkts[i].Buf = pkts[i].Buf, pkts[n].Buf[:cap(pkts[n].Buf)]
				pkts[n].Peer, pkts[n].CE = pkts[i].Peer, pkts[i].CE
			}
			pkts[n].SrcPort, pkts[n].Lent, pkts[n].ICRCPending = 0, nil, false
			n++
		}
		u.addRx(&c)
		if n > 0 {
			return n, nil
		}
	}
}

// recv reads up to cnt datagrams into u.rd.m's messages; u.rd is held.
// Without wait it returns 0 when none has arrived; with wait it returns 0
// when Interrupt ends the wait.
func (u *Link) recv(cnt int, wait bool) (int, error) {
	if wait && u.set.takeInterrupt() {
		u.sock.unwatch() // the reader makes way for a busy poller
		return 0, nil
	}
	asked := cnt
	if !wait {
		asked = u.rd.ask.next(cnt)
	}
	k, err := u.recvFrom(asked, wait)
	switch {
	case err == nil:
		if !wait {
			u.rd.ask.got(asked, k, u.rd.m.first(0))
		}
		return k, nil
	case errors.Is(err, errInterrupted):
		return 0, nil
	case errors.Is(err, errWoken), errors.Is(err, net.ErrClosed):
		return 0, err
	default:
		return 0, fmt.Errorf("link: read %v: %w", u.laddr, err)
	}
}

// datagram checks what the kernel says of received message i of m: not
// truncated, at least minSize bytes, from the link's address family. It
// counts a datagram it refuses in c, notes the socket's drop count, and
// returns the datagram's size, sender and control-message metadata (see
// rxMeta).
func (u *Link) datagram(m *mmsg, i, minSize int, c *rxTally) (size int, peer netip.AddrPort, ce bool, seg int, ok bool) {
	h := &m.hs[i]
	size = int(h.n)
	if h.hdr.Flags&syscall.MSG_TRUNC != 0 {
		c.Oversized++
		return 0, peer, false, 0, false
	}
	if size < minSize {
		c.Malformed++
		return 0, peer, false, 0, false
	}
	peer, ok = m.name(i)
	if !ok || peer.Addr().Is4() != u.laddr.Addr().Is4() {
		c.Malformed++
		return 0, peer, false, 0, false
	}
	ce, seg, drops := m.rxMeta(i)
	c.noteDrops(drops)
	return size, peer, ce, seg, true
}

// accept checks datagram i of m, which the kernel wrote into p.Buf's
// backing array, and on success reslices p.Buf to it and sets p.Peer.
func (u *Link) accept(m *mmsg, i int, p *link.Packet, c *rxTally) bool {
	size, peer, ce, _, ok := u.datagram(m, i, link.MinPacket, c)
	if !ok {
		return false
	}
	pkt := p.Buf[:size]
	want := u.rd.ids.next(peer)
	id, ok := link.CheckICRCID(peer, u.laddr, pkt, want, &u.rd.hdr)
	if !ok {
		c.ICRC++
		return false
	}
	if id != want {
		c.Recovered++
	}
	u.rd.ids.note(peer, id, id)
	p.Buf, p.Peer, p.CE = pkt, peer, ce
	c.Packets++
	c.Bytes += uint64(size)
	return true
}

// rxTally is a read's link.RxCount plus what only a UDP link counts.
type rxTally struct {
	link.RxCount
	drops     uint32 // the highest SO_RXQ_OVFL count seen
	flow      bool   // the datagrams came from the flow socket
	datagrams uint64 // datagrams taken (counted for the flow socket)
}

// noteDrops records the socket drop count a datagram carried.
func (r *rxTally) noteDrops(n uint32) { r.drops = max(r.drops, n) }

// addRx adds a read's tally to the link's counters.
func (u *Link) addRx(c *rxTally) {
	c.RxCount.AddTo(u.stats)
	drops := &u.drops.sock
	if c.flow {
		drops = &u.drops.flow
		u.stats.Add(stats.FlowDatagrams, c.datagrams)
	}
	for d := uint64(c.drops); d != 0; {
		old := drops.Load()
		if d <= old || drops.CompareAndSwap(old, d) {
			break
		}
	}
}
