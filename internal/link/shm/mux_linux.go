//go:build linux

package shm

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// Mux is a link that sends to same-host peers through shared-memory rings
// and to every other peer through its inner link, and reads both.
type Mux struct {
	inner     Inner
	laddr     netip.AddrPort
	deferICRC bool
	closed    atomic.Bool
	stats     *stats.Counters // the rings' traffic; the inner link counts its own

	dir  string // the rendezvous directory of this user and namespace
	path string // this link's socket in it
	ln   *net.UnixListener
	wg   sync.WaitGroup // the listener's goroutines
	wake int            // eventfd the inner link's reader watches: a channel was added or ended

	// Sending, under writeMu.
	writeMu sync.Mutex
	out     map[netip.AddrPort]*shmOut
	last    *shmOut          // the channel of the last packet sent, or nil
	txHdr   wire.HeaderCache // the sent packets' ICRC headers
	open    atomic.Int32     // channels in out with a ring

	// Receiving: channels the listener accepted wait in added (under mu)
	// until the reader takes them into in (under readMu).
	mu          sync.Mutex
	added       []*shmIn
	conns       map[*net.UnixConn]bool // open accepted connections, for close
	pending     atomic.Bool            // added is not empty
	readMu      sync.Mutex
	in          []*shmIn
	next        int              // the channel to read first, for fairness
	skipped     int              // reads since the last that looked at the socket (shmSocketPolls)
	socketPolls uint64           // reads that looked at the socket without waiting (tests)
	rxHdr       wire.HeaderCache // the received ring packets' ICRC headers
	innerLent   bool             // the read in progress borrowed from the inner link
}

var _ link.Link = (*Mux)(nil)

// New starts the same-host path in front of inner: it listens for same-host
// peers (a goroutine that accepts their channels, until Close) and takes
// over inner's reads and writes. Close closes inner too.
func New(inner Inner, cfg Config) (*Mux, error) {
	laddr := inner.LocalAddr()
	dir, err := rendezvousDir(cfg.Dir, cfg.NetNS)
	if err != nil {
		return nil, fmt.Errorf("link: same-host path of %v: %w", laddr, err)
	}
	s := &Mux{inner: inner, laddr: laddr, deferICRC: cfg.DeferICRC, stats: stats.New(),
		dir: dir, path: socketName(dir, laddr), out: map[netip.AddrPort]*shmOut{}, conns: map[*net.UnixConn]bool{}}
	// A socket left by a process that died is removed; one that answers
	// belongs to a live link, which cannot hold this address and port
	// (the UDP bind is exclusive) unless it is shutting down.
	if c, err := net.Dial("unix", s.path); err == nil {
		c.Close()
		return nil, fmt.Errorf("link: same-host path of %v: %s is in use", laddr, s.path)
	}
	os.Remove(s.path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("link: same-host path of %v: %w", laddr, err)
	}
	ln.SetUnlinkOnClose(true)
	if s.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		ln.Close()
		return nil, os.NewSyscallError("eventfd", err)
	}
	if err := inner.Watch(s.wake); err != nil {
		ln.Close()
		unix.Close(s.wake)
		return nil, err
	}
	inner.SetWake(s.woken)
	s.ln = ln
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// LocalAddr implements link.Link.LocalAddr: the inner link's address.
func (s *Mux) LocalAddr() netip.AddrPort { return s.laddr }

// Caps implements link.Link.Caps: the inner link's, and the rings lend,
// defer ICRC checks if asked to, and make writes cheap while a channel is
// open.
func (s *Mux) Caps() link.Caps {
	c := s.inner.Caps() | link.CapLend
	if s.deferICRC {
		c |= link.CapDeferICRC
	}
	if s.open.Load() > 0 {
		c |= link.CapCheapWrite
	}
	return c
}

// Stats implements link.Link.Stats: the inner link's counters and the
// rings'.
func (s *Mux) Stats() link.Stats {
	st := s.inner.Stats()
	r := s.stats.Snapshot()
	for i := range st {
		st[i] += r[i]
	}
	return st
}

// Interrupt implements link.Link.Interrupt: a waiting read waits in the
// inner link.
func (s *Mux) Interrupt() { s.inner.Interrupt() }

// Segments implements link.Link.Segments: packets to a same-host peer go
// into its ring, one packet per slot whatever their sizes, and others as
// the inner link sends them. A peer counts as same-host when it listens
// for same-host channels (its rendezvous socket exists), as the first
// packet to it will find.
func (s *Mux) Segments(peer netip.AddrPort) bool {
	return s.viaSocket(link.Plain(peer)) && s.inner.Segments(peer)
}

// ConnectPort implements link.Link.ConnectPort: only packets that leave
// through the inner link need a socket ready.
func (s *Mux) ConnectPort(sport uint16, peer netip.AddrPort) {
	if s.viaSocket(link.Plain(peer)) {
		s.inner.ConnectPort(sport, peer)
	}
}

// viaSocket reports whether packets to peer (plain) go through the inner
// link rather than a ring, as the first packet to peer will find.
func (s *Mux) viaSocket(peer netip.AddrPort) bool {
	if peer == s.laddr || peer.Addr().Is4() != s.laddr.Addr().Is4() {
		return true // dial's rule: these go over the socket
	}
	_, err := os.Stat(socketName(s.dir, peer))
	return err != nil
}

// Close closes the inner link, which ends the reads and writes waiting in
// it, then every channel, once no read or write can touch the rings.
func (s *Mux) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	err := s.inner.Close()
	s.readMu.Lock()
	s.writeMu.Lock()
	s.close()
	s.writeMu.Unlock()
	s.readMu.Unlock()
	return err
}

// ReadBatch implements link.Link.ReadBatch.
func (s *Mux) ReadBatch(pkts []link.Packet) (int, error) { return s.read(pkts, true) }

// PollBatch implements link.Link.PollBatch.
func (s *Mux) PollBatch(pkts []link.Packet) (int, error) { return s.read(pkts, false) }

// read is ReadBatch, or with wait false PollBatch.
func (s *Mux) read(pkts []link.Packet, wait bool) (int, error) {
	n, err := s.readHeld(pkts, wait, false)
	if n > 0 {
		s.ReturnLent() // nothing was lent, but the read lock goes
	}
	return n, err
}

// ReadLent implements link.Link.ReadLent: ring slots are lent in place,
// and the inner link's packets as it lends them.
func (s *Mux) ReadLent(pkts []link.Packet, wait bool) (int, error) {
	return s.readHeld(pkts, wait, true)
}

// ReturnLent implements link.Link.ReturnLent.
func (s *Mux) ReturnLent() {
	s.release()
	if s.innerLent {
		s.innerLent = false
		s.inner.ReturnLent()
	}
	s.readMu.Unlock()
}

// readHeld reads a batch under readMu (lending with lend) and returns with
// readMu still held when it returns packets; without wait it returns 0
// when another read holds readMu.
func (s *Mux) readHeld(pkts []link.Packet, wait, lend bool) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	pkts = pkts[:min(len(pkts), link.MaxBatch)]
	if !wait {
		if !s.readMu.TryLock() {
			return 0, nil
		}
	} else {
		s.readMu.Lock()
	}
	if s.closed.Load() {
		s.readMu.Unlock()
		return 0, net.ErrClosed
	}
	n, err := s.readLocked(pkts, wait, lend)
	if n == 0 || err != nil {
		s.readMu.Unlock()
	}
	return n, err
}

// readLocked is read with readMu held: the rings and the inner link take
// turns when both have packets. A read looks at the socket first on one
// read in shmSocketPolls, whether the rings had packets for the reads
// between or not: a look at the rings costs nanoseconds, one at the
// socket a system call, and a stream on the rings must not starve the
// socket.
func (s *Mux) readLocked(pkts []link.Packet, wait, lend bool) (int, error) {
	for {
		polled := false
		if s.skipped >= shmSocketPolls-1 {
			s.skipped, polled = 0, true
			s.socketPolls++
			if n, err := s.readInner(pkts, false, lend); n > 0 || err != nil {
				return n, err
			}
		}
		if n := s.readRings(pkts, lend); n > 0 {
			if !polled {
				s.skipped++
			}
			return n, nil
		}
		if !wait {
			switch {
			case polled:
				return 0, nil
			case len(s.in) > 0:
				s.skipped++
				return 0, nil
			}
			// No same-host channel yet: the socket is the only way in.
			s.socketPolls++
			return s.readInner(pkts, false, lend)
		}
		// A producer rings the doorbell only for a consumer that said it
		// would wait, and said so before its last look at the ring.
		s.setWaiting(true)
		if s.ready() {
			s.setWaiting(false)
			continue
		}
		n, err := s.readInner(pkts, true, lend)
		s.setWaiting(false)
		if errors.Is(err, link.ErrWoken) {
			continue
		}
		return n, err
	}
}

// readInner reads from the inner link; readMu is held.
func (s *Mux) readInner(pkts []link.Packet, wait, lend bool) (int, error) {
	if lend {
		n, err := s.inner.ReadLent(pkts, wait)
		s.innerLent = n > 0 && err == nil
		return n, err
	}
	if wait {
		return s.inner.ReadBatch(pkts)
	}
	return s.inner.PollBatch(pkts)
}

// WriteBatch implements link.Link.WriteBatch: runs of packets to a peer
// with a channel go into its ring, the others to the inner link.
func (s *Mux) WriteBatch(pkts []link.Packet) (int, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	done := 0
	for done < len(pkts) {
		// A run: packets to one channel, or to peers without one. The
		// channel is looked up once per change of peer.
		peer := link.Plain(pkts[done].Peer)
		o := s.channel(peer)
		end := done + 1
		for ; end < len(pkts); end++ {
			next := link.Plain(pkts[end].Peer)
			if next != peer {
				if o != nil || s.channel(next) != nil {
					break
				}
				peer = next
			}
		}
		if o == nil {
			k, err := s.inner.WriteBatch(pkts[done:end])
			done += k
			if err != nil {
				return done, err
			}
			continue
		}
		if !o.alive(false) {
			s.drop(o)
			continue // the same packets, over UDP
		}
		var err error
		var bytes uint64
		for i := done; i < end; i++ {
			p := &pkts[i]
			if err = s.check(p); err != nil {
				end = i
				break
			}
			bytes += uint64(p.Size())
		}
		n := o.send(pkts[done:end], s.laddr, &s.txHdr)
		if n < end-done {
			n += s.waitRing(o, pkts[done+n:end])
		}
		if lost := end - done - n; lost > 0 {
			// A ring that stays full drops, as a full socket buffer
			// would; the transport resends.
			s.stats.Add(stats.SameHostDrops, uint64(lost))
			if !o.alive(true) {
				s.drop(o)
			}
		}
		s.stats.Add(stats.SameHostPkts, uint64(n))
		link.CountTx(s.stats, uint64(end-done), bytes, err)
		done = end
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// check returns why p cannot go into a ring, or nil.
func (s *Mux) check(p *link.Packet) error {
	if !p.Sendable(true) {
		return link.ErrPacketSize
	}
	if p.Peer.Addr().Unmap().Is4() != s.laddr.Addr().Is4() {
		return link.ErrAddrFamily
	}
	return nil
}

// shmFullWait is how long a sender waits for room in a full same-host
// ring before it drops: a consumer that is alive drains a ring in
// microseconds, and waiting costs less than the retransmission a drop
// brings. It is short, so that two devices that both wait for each other
// (each worker writing, each reader blocked handing packets to it) drop
// rather than stall.
const shmFullWait = 200 * time.Microsecond

// waitRing puts pkts into o's full ring as room appears, for at most
// shmFullWait, and returns how many went in; writeMu is held.
func (s *Mux) waitRing(o *shmOut, pkts []link.Packet) int {
	n := 0
	deadline := monotime.Now().Add(shmFullWait)
	for n < len(pkts) && o.alive(false) && !s.closed.Load() && monotime.Now().Before(deadline) {
		runtime.Gosched()
		n += o.send(pkts[n:], s.laddr, &s.txHdr)
	}
	return n
}

// close ends every channel; the locks are held, the reads and writes are
// over, and the inner link is closed.
func (s *Mux) close() {
	s.ln.Close()
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	s.wg.Wait()
	s.take()
	for _, in := range s.in {
		s.closeIn(in)
	}
	s.in = nil
	s.inner.Unwatch(s.wake)
	unix.Close(s.wake)
	for _, o := range s.out {
		if o.ring != nil {
			s.drop(o)
		}
	}
}
