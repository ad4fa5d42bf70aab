package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/prefetch"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// The same-host path (UDPConfig.SameHost).
//
// Two goroce links on one host, in one network namespace, that both have
// it move their packets through shared memory instead of UDP sockets: a
// real RDMA NIC does the same for traffic between two of its own ports
// (rxe: rxe_loopback), and MPI and UCX libraries do it between processes
// of one node. The packets are the same RoCEv2 packets, ICRC included,
// checked by the receiver as if they had come through its socket; only the
// socket copies and system calls are gone, which on loopback cost as much
// as TCP's whole transfer.
//
// Rendezvous. A link listens on a Unix socket named after its address in a
// directory only its user can enter: the run directory where devices also
// publish their counters ($GOROCE_RUN_DIR, default goroce-<uid> in the
// temporary directory), checked to be a directory owned by the user with
// mode 0700, then one subdirectory per network namespace (the inode of
// /proc/self/ns/net). Only processes of the same user can reach it, and the
// listener checks the peer's credentials (SO_PEERCRED) again; processes of
// one user can already read each other's memory (ptrace), so this adds no
// new way in. Links of other users, other namespaces and other hosts are
// reached over UDP as before.
//
// Channels. A link that sends to a peer address for the first time dials
// the peer's socket. If it answers, the sender creates a ring in a memfd
// and an eventfd doorbell and passes both (SCM_RIGHTS) with its own
// address; from then on its packets to that peer go into the ring and the
// peer's reader takes them from there. Each direction is its own channel,
// made by its sender. A peer with no socket is retried after a second.
//
// The ring: a header page (producer index, consumer index, the consumer's
// "I am going to sleep" flag, the consumer's "closed" flag) and
// shmSlots slots of a length, the UDP source port and one packet. The
// producer fills slots and publishes its index; the consumer lends the
// slots to the device (Lender) and publishes its index when they come back.
// A consumer about to wait sets its flag and looks again; a producer that
// finds the flag set clears it and rings the doorbell, which is in the
// link's epoll set. A busy poller never sets the flag, so no system call is
// made at all while polling. A full ring drops the packet (counted in
// Stats.SameHostDrops), as a full socket buffer would, and the transport
// resends it. Everything read from shared memory is checked: indices that
// move backwards or too far, a length out of range or a wrong ICRC end the
// channel or drop the packet, never a read outside the ring.
//
// A channel ends when either side closes it or exits: the consumer marks
// the ring closed when its link closes, and the producer sees that (or,
// when the consumer died, the dial socket's end-of-file once the ring
// fills) and goes back to UDP.

const (
	shmSlots    = SameHostSlots
	shmSlotHdr  = 8 // length (4), source port (2), reserved (2)
	shmSlotSize = (shmSlotHdr + MaxPacket + 63) &^ 63
	shmHdrSize  = 4096
	shmRingSize = shmHdrSize + shmSlots*shmSlotSize

	// Header fields, each on its own cache line.
	shmOffTail    = 0   // producer: slots published (uint64)
	shmOffHead    = 64  // consumer: slots consumed (uint64)
	shmOffWaiting = 128 // consumer: 1 while it is about to wait for the doorbell (uint32)
	shmOffClosed  = 192 // consumer: 1 once it reads no more (uint32)

	shmRetry = time.Second // how long a peer without a same-host socket is left to UDP

	// shmSocketPolls: with same-host channels open, a busy poller reads
	// the socket on one poll in this many (readLocked).
	shmSocketPolls = 8

	// shmPrefetchAhead and shmPrefetchLines: the producer, having
	// written a slot, asks the CPU for the slot shmPrefetchAhead further
	// on, to be written; the consumer, reading one, for the slot as far
	// on, if it is published. The prefetch covers as many cache lines as
	// the packet in hand takes (the next ones are likely its size), at
	// most shmPrefetchLines: past that, a copy is long enough for the
	// CPU's own prefetcher, unless the two CPUs are far apart, where the
	// producer asks for whole slots (slotWidth). A slot's lines move
	// between the cores every time around the ring (the consumer read
	// them last, the producer wrote them last), and without the hint
	// each store of a small packet waited for one: 64-byte WRITEs
	// between two processes, 1.82 M/s with it against 1.51 (6 rotated
	// rounds; PREFETCHT0 for the producer's, 1.60), the client's CPU per
	// message 0.50 µs against 0.62.
	shmPrefetchAhead = 4
	shmPrefetchLines = 8
)

// SameHostSlots is how many packets a same-host ring holds: a power of
// two, and more than a device's RC QPs have in flight together (the
// engine's send budget, internal/device: TestRingHoldsBudget), so that a
// live consumer's ring never overflows while the budget holds.
const SameHostSlots = 2048

// prefetchSlot asks the CPU for the lines that a packet of size bytes
// takes in slot, at most limit, to be written or read.
func prefetchSlot(slot []byte, size int, write bool, limit int) {
	lines := min((shmSlotHdr+size+prefetch.LineSize-1)/prefetch.LineSize, limit)
	if write {
		prefetch.Write(unsafe.Pointer(&slot[0]), lines)
	} else {
		prefetch.Read(unsafe.Pointer(&slot[0]), lines)
	}
}

// A dialing sender writes a hello, with the memfd and the eventfd as
// rights: magic, version, ring geometry (slots, slot size) and its IP
// address, which the receiver's packets from this ring report as their
// source.
const (
	shmMagic    = "goroceSH"
	shmHelloLen = 8 + 4 + 4 + 4 + 16
)

// shmRing is one ring: shared memory mapped from a memfd, or (in tests)
// ordinary memory.
type shmRing struct {
	mem    []byte
	mapped bool
}

func (r *shmRing) u64(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&r.mem[off])) }
func (r *shmRing) u32(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&r.mem[off])) }
func (r *shmRing) slot(i uint64) []byte {
	off := shmHdrSize + int(i%shmSlots)*shmSlotSize
	return r.mem[off : off+shmSlotSize : off+shmSlotSize]
}
func (r *shmRing) unmap() {
	if r.mapped {
		unix.Munmap(r.mem)
	}
}

// sameHost is a link's same-host state.
type sameHost struct {
	u    *UDP
	dir  string // the rendezvous directory of this user and namespace
	path string // this link's socket in it
	ln   *net.UnixListener
	wg   sync.WaitGroup // the listener's goroutines
	wake int            // eventfd in the link's epoll set: a channel was added or ended

	// Sending, under u.writeMu.
	out  map[netip.AddrPort]*shmOut
	last *shmOut      // the channel of the last packet sent, or nil
	open atomic.Int32 // channels in out with a ring

	// Receiving: channels the listener accepted wait in added until the
	// reader takes them into in (under u.readMu).
	mu          sync.Mutex
	added       []*shmIn
	conns       map[*net.UnixConn]bool // open accepted connections, for close
	pending     atomic.Bool            // added is not empty
	in          []*shmIn
	next        int    // the channel to read first, for fairness
	skipped     int    // reads since the last that looked at the socket (shmSocketPolls)
	socketPolls uint64 // reads that looked at the socket without waiting (tests)
}

// shmOut is a channel this link sends on.
type shmOut struct {
	peer     netip.AddrPort
	ring     *shmRing // nil: no channel, send over UDP
	doorbell int
	conn     *net.UnixConn
	tail     uint64    // the next slot to fill (the producer's own copy)
	head     uint64    // the consumer's index as last read: slots before it are free
	retryAt  time.Time // no channel: when to dial again
	width    slotWidth // how much of the slots ahead send asks for
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

// rendezvousDir returns this user's directory for network namespace ns
// (nil: the process's own), creating it, or an error if it is not safe to
// use.
func rendezvousDir(ns *netns.NS) (string, error) {
	uid := os.Getuid()
	dir := stats.Dir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != uid || st.Mode&0o077 != 0 {
		return "", fmt.Errorf("%s is not a directory of uid %d with mode 0700", dir, uid)
	}
	ino, err := ns.Inode()
	if err != nil {
		return "", err
	}
	dir = filepath.Join(dir, "samehost-netns-"+strconv.FormatUint(ino, 10))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	return dir, nil
}

func socketName(dir string, a netip.AddrPort) string {
	return filepath.Join(dir, a.Addr().Unmap().String()+"_"+strconv.Itoa(int(a.Port())))
}

// startSameHost listens for same-host peers of u.
func startSameHost(u *UDP) (*sameHost, error) {
	dir, err := rendezvousDir(u.ns)
	if err != nil {
		return nil, err
	}
	s := &sameHost{u: u, dir: dir, path: socketName(dir, u.laddr), out: map[netip.AddrPort]*shmOut{}, conns: map[*net.UnixConn]bool{}}
	// A socket left by a process that died is removed; one that answers
	// belongs to a live link, which cannot hold this address and port
	// (the UDP bind is exclusive) unless it is shutting down.
	if c, err := net.Dial("unix", s.path); err == nil {
		c.Close()
		return nil, fmt.Errorf("%s is in use", s.path)
	}
	os.Remove(s.path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(true)
	if s.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		ln.Close()
		return nil, os.NewSyscallError("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.wake)}
	if err := unix.EpollCtl(u.set.epfd, unix.EPOLL_CTL_ADD, s.wake, &ev); err != nil {
		ln.Close()
		unix.Close(s.wake)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	s.ln = ln
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// accept takes the channels peers open to this link.
func (s *sameHost) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.conns == nil { // closing
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

// serve sets up the channel a peer opens on c, then waits for the peer to
// close c, which ends the channel.
func (s *sameHost) serve(c *net.UnixConn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	in, err := s.handshake(c)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.added = append(s.added, in)
	s.pending.Store(true)
	s.mu.Unlock()
	signal(s.wake)
	var b [1]byte
	c.Read(b[:]) // returns when the peer closes or exits, or on Close
	in.dead.Store(true)
	signal(s.wake) // a waiting reader retires the channel (ready)
}

// handshake checks a peer's hello and maps its ring.
func (s *sameHost) handshake(c *net.UnixConn) (*shmIn, error) {
	c.SetDeadline(time.Now().Add(2 * time.Second))
	defer c.SetDeadline(time.Time{})
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cerr != nil || int(cred.Uid) != os.Getuid() {
		return nil, errors.New("peer of another user")
	}
	msg := make([]byte, shmHelloLen)
	oob := make([]byte, unix.CmsgSpace(2*4))
	n, oobn, _, _, err := c.ReadMsgUnix(msg, oob)
	if err != nil {
		return nil, err
	}
	fds := parseRights(oob[:oobn])
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if n != shmHelloLen || string(msg[:8]) != shmMagic || len(fds) != 2 ||
		binary.LittleEndian.Uint32(msg[8:]) != 1 || binary.LittleEndian.Uint32(msg[12:]) != shmSlots ||
		binary.LittleEndian.Uint32(msg[16:]) != shmSlotSize {
		closeAll()
		return nil, errors.New("bad hello")
	}
	peer := netip.AddrFrom16([16]byte(msg[20:36])).Unmap()
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil || st.Size != shmRingSize {
		closeAll()
		return nil, errors.New("bad ring")
	}
	mem, err := unix.Mmap(fds[0], 0, shmRingSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	unix.Close(fds[0])
	if err != nil {
		unix.Close(fds[1])
		return nil, err
	}
	in := &shmIn{peer: peer, ring: &shmRing{mem: mem, mapped: true}, doorbell: fds[1]}
	in.head = in.ring.u64(shmOffHead).Load()
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(in.doorbell)}
	if err := unix.EpollCtl(s.u.set.epfd, unix.EPOLL_CTL_ADD, in.doorbell, &ev); err != nil {
		in.ring.unmap()
		unix.Close(in.doorbell)
		return nil, err
	}
	if _, err := c.Write([]byte{'k'}); err != nil {
		unix.EpollCtl(s.u.set.epfd, unix.EPOLL_CTL_DEL, in.doorbell, nil)
		in.ring.unmap()
		unix.Close(in.doorbell)
		return nil, err
	}
	return in, nil
}

func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

// channel returns the channel to send to peer on, or nil for UDP; u.writeMu
// is held.
func (s *sameHost) channel(peer netip.AddrPort) *shmOut {
	if o := s.last; o != nil && o.peer == peer && o.ring != nil {
		return o
	}
	o := s.out[peer]
	switch {
	case o == nil:
		o = &shmOut{peer: peer}
		s.out[peer] = o
		s.dial(o)
	case o.ring == nil && time.Now().After(o.retryAt):
		s.dial(o)
	}
	if o.ring == nil {
		return nil
	}
	s.last = o
	return o
}

// dial opens a channel to o.peer, or sets when to try again.
func (s *sameHost) dial(o *shmOut) {
	o.retryAt = time.Now().Add(shmRetry)
	if o.peer.Addr().Unmap().Is4() != s.u.laddr.Addr().Is4() || o.peer == s.u.laddr {
		return
	}
	if _, err := os.Stat(socketName(s.dir, o.peer)); err != nil {
		return // the common case of a remote peer: no system call beyond this one
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socketName(s.dir, o.peer), Net: "unix"})
	if err != nil {
		return
	}
	ring, doorbell, err := s.offer(c)
	if err != nil {
		c.Close()
		return
	}
	*o = shmOut{peer: o.peer, ring: ring, doorbell: doorbell, conn: c, tail: ring.u64(shmOffTail).Load()}
	s.open.Add(1)
}

// offer creates a ring and a doorbell, passes them to the peer on c and
// waits for its answer.
func (s *sameHost) offer(c *net.UnixConn) (*shmRing, int, error) {
	mfd, err := unix.MemfdCreate("goroce-ring", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, -1, err
	}
	defer unix.Close(mfd)
	if err := unix.Ftruncate(mfd, shmRingSize); err != nil {
		return nil, -1, err
	}
	// MAP_POPULATE here and in the peer's handshake: the ring's pages
	// are allocated and mapped on both sides now, not one by one as the
	// first packets fill the slots. Each slot is a page of its own, and
	// a first touch costs a page fault on each side: the first 2048
	// packets of a channel, a latency test's first 1024 round trips, took
	// 8.5 µs one way instead of 2.1-2.3 (docs/perf/HISTORY.md, sixth
	// round). Writing the ring once more (its pages are zero already)
	// leaves its page table entries dirty and its lines in the cache: the
	// first pass through the ring then costs what later ones do (2.2-2.4
	// against 3.0 µs one way with the mapping alone).
	mem, err := unix.Mmap(mfd, 0, shmRingSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, -1, err
	}
	clear(mem)
	ring := &shmRing{mem: mem, mapped: true}
	doorbell, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		ring.unmap()
		return nil, -1, err
	}
	msg := make([]byte, shmHelloLen)
	copy(msg, shmMagic)
	binary.LittleEndian.PutUint32(msg[8:], 1)
	binary.LittleEndian.PutUint32(msg[12:], shmSlots)
	binary.LittleEndian.PutUint32(msg[16:], shmSlotSize)
	a16 := s.u.laddr.Addr().As16()
	copy(msg[20:36], a16[:])
	c.SetDeadline(time.Now().Add(2 * time.Second))
	_, _, err = c.WriteMsgUnix(msg, unix.UnixRights(mfd, doorbell), nil)
	var ack [1]byte
	if err == nil {
		_, err = c.Read(ack[:])
	}
	c.SetDeadline(time.Time{})
	if err == nil && ack[0] != 'k' {
		err = errors.New("refused")
	}
	if err != nil {
		ring.unmap()
		unix.Close(doorbell)
		return nil, -1, err
	}
	return ring, doorbell, nil
}

// send puts the packets (checked, sent from laddr or their SrcPort) into
// o's ring and returns how many went in; the rest did not fit. Each packet
// is copied into its slot and its ICRC computed in the same pass
// (wire.IPFields.ICRCCopy), a gathered payload (Packet.Payload) taken
// from where it lies; the ICRC goes into the slot only, Buf keeps its
// room for it unfilled. The CRC of the headers ahead of the BTH comes
// from hdr (u.txHdr), as for the socket's packets: computed per packet, it
// was a tenth of a 64 KiB stream's CPU on either end. u.writeMu is held.
func (o *shmOut) send(pkts []Packet, laddr netip.AddrPort, hdr *wire.HeaderCache) int {
	r := o.ring
	n := 0
	wide, timed := o.width.next()
	limit := shmPrefetchLines
	if wide {
		limit = shmSlotSize / prefetch.LineSize
	}
	var start time.Duration
	if timed {
		start = time.Since(monoStart)
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
		size := p.size()
		binary.LittleEndian.PutUint32(slot, uint32(size))
		sport := p.SrcPort
		if sport == 0 {
			sport = laddr.Port()
		}
		binary.LittleEndian.PutUint16(slot[4:], sport)
		f := sendFields(netip.AddrPortFrom(laddr.Addr(), sport), o.peer)
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
			ns = int64(time.Since(monoStart) - start)
		}
		o.width.note(wide, timed, ns, large)
		if r.u32(shmOffWaiting).Load() != 0 && r.u32(shmOffWaiting).CompareAndSwap(1, 0) {
			signal(o.doorbell)
		}
	}
	return n
}

// monoStart is where the same-host sender's clock (slotWidth's timing)
// counts from: time.Since of it reads only the monotonic clock.
var monoStart = time.Now()

// alive reports whether the consumer still reads o's ring; u.writeMu is
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

// drop ends a channel this link sent on; u.writeMu is held.
func (s *sameHost) drop(o *shmOut) {
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
	*o = shmOut{peer: o.peer, retryAt: time.Now().Add(shmRetry)}
}

// take moves the channels the listener accepted to s.in; u.readMu is held.
func (s *sameHost) take() {
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
func (s *sameHost) woken() bool {
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
func (s *sameHost) ready() bool {
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

// setWaiting sets or clears the consumers' flags; u.readMu is held.
func (s *sameHost) setWaiting(on bool) {
	v := uint32(0)
	if on {
		v = 1
	}
	for _, in := range s.in {
		in.ring.u32(shmOffWaiting).Store(v)
	}
}

// read fills pkts from the rings, lending the slots with lend (copying
// them into Buf otherwise), and returns how many; u.readMu is held.
func (s *sameHost) read(pkts []Packet, lend bool) int {
	s.take()
	n := 0
	var c rxCount
	deferICRC := lend && s.u.deferICRC
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
			if size < minPacket || size > MaxPacket {
				c.malformed++
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
					c.oversized++
					continue
				}
				p.Buf = p.Buf[:size]
				copy(p.Buf, pkt)
				pkt = p.Buf
			}
			p.ICRCPending = false
			if deferICRC {
				// The borrower checks it (ICRCDeferrer), in the pass
				// that places the payload.
				f := sendFields(src, s.u.laddr)
				f.Cache = &s.u.rxHdr
				p.ICRCPending, p.ICRCSeed = true, f.HeaderCRC(pkt[:size-wire.ICRCLen])
			} else if !checkICRC(src, s.u.laddr, pkt, &s.u.rxHdr) {
				c.icrc++
				continue
			}
			p.Lent = nil
			if lend {
				p.Lent = pkt
			}
			p.Peer, p.CE, p.SrcPort = src, false, 0
			c.packets++
			c.bytes += uint64(size)
			n++
		}
	}
	s.next++
	s.u.stats.addRx(&c)
	if !lend {
		s.release()
	}
	s.retire()
	return n
}

// release gives the slots the last read took back to their producers;
// u.readMu is held.
func (s *sameHost) release() {
	for _, in := range s.in {
		if in.lent > 0 {
			in.head += in.lent
			in.lent = 0
			in.ring.u64(shmOffHead).Store(in.head)
		}
	}
}

// retire ends the channels whose producer went away, once nothing of
// theirs is lent; u.readMu is held.
func (s *sameHost) retire() {
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

func (s *sameHost) closeIn(in *shmIn) {
	in.ring.u32(shmOffClosed).Store(1)
	if in.doorbell >= 0 {
		unix.EpollCtl(s.u.set.epfd, unix.EPOLL_CTL_DEL, in.doorbell, nil)
		unix.Close(in.doorbell)
	}
	in.ring.unmap()
}

// close ends every channel; the link's locks are held, its reads and
// writes are over.
func (s *sameHost) close() {
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
	unix.EpollCtl(s.u.set.epfd, unix.EPOLL_CTL_DEL, s.wake, nil)
	unix.Close(s.wake)
	for _, o := range s.out {
		if o.ring != nil {
			s.drop(o)
		}
	}
}
