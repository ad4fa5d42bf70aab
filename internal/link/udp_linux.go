package link

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/wire"
)

// UDPConfig configures ListenUDP. Its zero value is not enough: Addr must name
// a local IP address.
type UDPConfig struct {
	// Addr is the local address to bind. The IP must be a specific local
	// address (IPv4 or IPv6; an IPv6 link-local address needs its zone),
	// not 0.0.0.0 or ::, because the ICRC of every packet covers the source
	// and destination IP and a wildcard socket learns neither without a
	// control message per packet. Port 0 means 4791, the RoCEv2 port.
	Addr netip.AddrPort

	// ReadBuffer and WriteBuffer are the socket's SO_RCVBUF and SO_SNDBUF
	// in bytes; 0 means 4 MiB. As root (CAP_NET_ADMIN) SO_RCVBUFFORCE and
	// SO_SNDBUFFORCE set them past net.core.rmem_max and wmem_max;
	// otherwise those sysctls cap them.
	ReadBuffer, WriteBuffer int

	// Interface, when valid, makes the link a member of the multicast
	// group Addr names, on the interface that holds this local address:
	// the socket is bound to (group, port) with SO_REUSEADDR, so every
	// link on the host that joins the group gets each of its packets,
	// and joins it with IP_ADD_MEMBERSHIP or IPV6_JOIN_GROUP. Such a
	// link is for receiving; send to the group from a unicast link.
	Interface netip.Addr

	// NoGSO turns off UDP segmentation offload on send and receive
	// aggregation (UDP_SEGMENT, UDP_GRO; see gso_linux.go), which are on
	// by default where the kernel has them (Linux 5.0 and later). With
	// GSO, IPv4 datagrams leave with a UDP checksum, because the kernel
	// will not segment for a socket with SO_NO_CHECK; without it, with
	// checksum 0, as rxe's do. A link with a Fault stage sends without
	// GSO (and with checksum 0) but still receives with GRO.
	NoGSO bool

	// Fault makes the link drop, duplicate, reorder, corrupt, delay or
	// CE-mark the packets it sends, after filling their ICRC; the zero
	// value does nothing. See FaultConfig.
	Fault FaultConfig

	// SameHost moves packets to peer links of the same user in the same
	// network namespace through shared memory instead of the socket
	// (samehost_linux.go); traffic to every other peer still goes over
	// UDP. It starts a goroutine that listens for such peers. It cannot
	// be combined with Fault, which simulates a network.
	SameHost bool

	// NetNS, if not nil, is the network namespace the link's sockets are
	// made in (the per-port ones too, when they are opened); Addr is an
	// address there. Nil means the process's own namespace.
	NetNS *netns.NS

	// DeferICRC has the same-host path lend its packets with their ICRC
	// unchecked, for the borrower to check (CapDeferICRC).
	DeferICRC bool

	// ReportCE has the socket report each datagram's IPv4 TOS or IPv6
	// traffic class (IP_RECVTOS, IPV6_RECVTCLASS), so that Packet.CE
	// tells which arrived marked ECN Congestion Experienced. Off, CE is
	// never set on packets read from the socket: the control message
	// costs the kernel about 0.1 µs per datagram on its way to the reader
	// (0.08–0.15 µs of a bare ping-pong's 3.0 µs one way), and nothing in
	// goroce acts on the mark yet; congestion control (DCQCN's CNPs) will
	// turn it on.
	ReportCE bool
}

const defaultSocketBuffer = 4 << 20

// stageSegment is the largest segment of a super-packet that sendRuns puts
// together in the link's stage, so that the kernel copies one I/O vector
// instead of one per segment.
const stageSegment = 512

// maxPortSockets caps the send-only sockets a UDP link opens for per-QP
// source ports.
const maxPortSockets = 1024

// UDP is a Link over a UDP socket: an unconnected socket bound to one local
// address, with DF set (IP_MTU_DISCOVER = IP_PMTUDISC_DO; IPv6:
// IPV6_MTU_DISCOVER = IPV6_PMTUDISC_DO and IPV6_DONTFRAG), moving packets
// with recvmmsg and sendmmsg. It allocates nothing per packet.
//
// The port is bound exclusively (no SO_REUSEPORT): a second link on the same
// address and port fails with EADDRINUSE instead of silently sharing its
// packets.
//
// Received packets are checked with the IP and UDP fields the socket reports:
// the peer's address and port, the bound address and port, and for IPv4 the
// identification recovered from the ICRC itself (wire.RecoverIPv4ID) and DF
// assumed in the flags. IPv6 packets get the full 32-bit check; IPv4 packets
// a 16-bit one (see docs/WIRE.md).
//
// Sent packets get an ICRC over DF and the IPv4 ID the kernel will give
// them: 0 from an unconnected socket with DF set (REFERENCE.md §9), the
// next value of its counter from a connected per-QP port socket (see
// below); TestWireHeaders and TestGSOSegmentIDs check both on the wire.
//
// GSO and GRO (gso_linux.go): runs of packets with one destination, source
// port and size leave as UDP_SEGMENT super-packets, segment k with its
// ICRC over IPv4 ID k (the ID the kernel gives it when it segments);
// super-packets that arrive whole (UDP_GRO) are split and each packet
// checked with ID k first. UDPConfig.NoGSO turns both off.
//
// UDP checksums: IPv6 datagrams leave with a checksum, and IPv6 datagrams
// that arrive with checksum 0, as rxe sends them, are accepted
// (UDP_NO_CHECK6_RX). IPv4 datagrams leave with checksum 0 (SO_NO_CHECK),
// as rxe's do, from a link without GSO; a link with GSO sends a checksum,
// which the kernel requires for segmentation. The ICRC, which masks the
// checksum, checks them all.
//
// Per-QP source ports: a packet whose SrcPort is neither 0 nor the link's
// port leaves from a send-only socket bound to (local IP, SrcPort), opened
// on first use with SO_REUSEADDR and SO_REUSEPORT and kept until Close.
// These sockets carry a socket filter that drops everything, so whatever
// arrives at them is discarded by the kernel (rxe only ever sends to port
// 4791). At most 1024 are opened; a packet whose port would need more, or
// whose port cannot be bound (another socket holds it without
// SO_REUSEPORT), leaves from the link's own port instead and is counted in
// Stats.PortFallbacks. The ICRC always covers the port the packet really
// leaves from. Consecutive packets with the same SrcPort go out in one
// sendmmsg. A port socket is connected to the peer of the first packet it
// sends, so that the kernel keeps its route, once the link has learned
// its IPv4 ID counter (idprobe_linux.go); Stats.ConnectedPorts and
// UnconnectedPorts count how that went.
//
// The flow socket: the first connection (ConnectPort) also gets a socket
// of its own for the datagrams it receives, bound to the link's address
// and port and connected to the peer's address and the connection's
// source port, so that the kernel finds it by early demux; the link reads
// it along with its bound socket (flowsock_linux.go, Stats.FlowSockets).
//
// Packet.CE reports the ECN bits of each datagram received (IP_RECVTOS,
// IPV6_RECVTCLASS). A packet the fault stage CE-marks leaves with TOS or
// traffic class 0x03, set by a control message to sendmmsg.
//
// A UDP link starts no goroutines, except a fault stage's (FaultConfig)
// and the same-host path's listener (UDPConfig.SameHost). Its sockets
// stay out of the Go netpoller's epoll set (sockfd_linux.go): ReadBatch
// waits in the netpoller on an epoll set of the link's own, from which
// Interrupt takes the socket; Close unblocks every wait.
type UDP struct {
	sock  *sockFD
	set   *sockSet       // the eventfds and close lock of sock and the port sockets
	laddr netip.AddrPort // unmapped, no zone
	bind  netip.Addr     // the IP as bound, with its zone
	scope uint32         // IPv6 scope (interface index) of a link-local address
	wbuf  int            // SO_SNDBUF, for the per-port sockets too
	ns    *netns.NS      // the sockets' network namespace; nil: the process's

	readMu sync.Mutex
	rd     *mmsg            // guarded by readMu
	rxHdr  wire.HeaderCache // the received packets' ICRC headers (socket and same-host rings); guarded by readMu
	ask    readAsk          // how many datagrams a poll asks for; guarded by readMu
	rxIDs  idGuess          // the IPv4 IDs the peers' next datagrams most likely carry; guarded by readMu
	turns  flowTurns        // which socket a poll looks at, with a flow socket; guarded by readMu
	flow   *sockFD          // the flow socket, once the reader took it over (adoptFlow); guarded by readMu
	rdFlow bool             // the last datagrams read came from the flow socket; guarded by readMu

	// The flow socket (flowsock_linux.go): flowNew holds it from its
	// opening until the reader takes it over; flowOK says the link may
	// open one, flowTried that it did or tried (guarded by writeMu), and
	// flowFD is its descriptor plus one, for Close (0: none; stored under
	// the sockets' lock, sockSet.ops, shared, and read under it exclusive).
	flowNew   atomic.Pointer[sockFD]
	flowOK    bool
	flowTried bool
	flowFD    atomic.Int32
	opts      sockOpts // the options the bound socket was opened with

	gro *groReader // nil: the socket receives without UDP_GRO; guarded by readMu
	sh  *sameHost  // nil: no same-host path (UDPConfig.SameHost)

	deferICRC bool // UDPConfig.DeferICRC, with the same-host path

	writeMu sync.Mutex
	wr      *mmsg            // guarded by writeMu
	stage   []byte           // super-packets of small segments put together (sendRuns); guarded by writeMu
	gso     bool             // send runs as UDP_SEGMENT super-packets; guarded by writeMu
	txHdr   wire.HeaderCache // the sent packets' ICRC headers (socket and same-host rings); guarded by writeMu
	fault   *faultStage      // nil: no faults
	fout    []faultOut       // the fault stage's output; guarded by writeMu

	probe     *idProbe // learns connected port sockets' ID counters; guarded by writeMu
	noConnect bool     // port sockets stay unconnected (the probe socket would not open)

	portsMu sync.Mutex
	ports   map[uint16]*portSocket // guarded by portsMu; nil value: could not bind
	// lastPort is the port socket the last write used (writePort);
	// guarded by writeMu.
	lastPort lastPort
	closed   bool // guarded by portsMu

	stats counters
}

// portSocket is a send-only socket bound to one source port. Its fields
// other than sock are guarded by UDP.writeMu.
type portSocket struct {
	sock *sockFD
	// peer is the address the socket is connected to (idprobe_linux.go);
	// invalid: unconnected, every datagram names its destination.
	peer netip.AddrPort
	// unconnected: connecting failed, or the IPv4 ID counter could not
	// be learned; the socket stays unconnected.
	unconnected bool
	// ids is the ID counter of a connected IPv4 socket.
	ids idCount
	// counted: the socket is counted in Stats.ConnectedPorts.
	counted bool
	// seg is the socket's UDP_SEGMENT option (0: unset), the segment
	// size of what it sends without a control message (loneSend);
	// lastSeg the segment size of the last lone super-packet it sent;
	// noSeg: setting the option failed, lone super-packets go with a
	// control message.
	seg, lastSeg uint16
	noSeg        bool
}

var _ Link = (*UDP)(nil)

// ListenUDP opens a UDP link bound to cfg.Addr.
func ListenUDP(cfg UDPConfig) (*UDP, error) {
	a := cfg.Addr
	if err := cfg.Fault.Validate(); err != nil {
		return nil, fmt.Errorf("link: listen %v: %w", a, err)
	}
	if cfg.SameHost && cfg.Fault.active() {
		return nil, fmt.Errorf("link: listen %v: SameHost and Fault exclude each other (faults simulate a network)", a)
	}
	ip := a.Addr().Unmap()
	if !ip.IsValid() || ip.IsUnspecified() {
		return nil, fmt.Errorf("link: listen %v: need a specific local IP address (the ICRC covers it)", a)
	}
	if a.Port() == 0 {
		a = netip.AddrPortFrom(ip, wire.UDPPort)
	} else {
		a = netip.AddrPortFrom(ip, a.Port())
	}
	var scope uint32
	if z := ip.Zone(); z != "" {
		var ifi *net.Interface
		err := cfg.NetNS.Do(func() (err error) {
			ifi, err = net.InterfaceByName(z)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("link: listen %v: %w", a, err)
		}
		scope = uint32(ifi.Index)
	}
	rbuf, wbuf := cfg.ReadBuffer, cfg.WriteBuffer
	if rbuf <= 0 {
		rbuf = defaultSocketBuffer
	}
	if wbuf <= 0 {
		wbuf = defaultSocketBuffer
	}
	// A link with a fault stage sends plain datagrams (the stage works on
	// single packets), so it keeps UDP checksum 0; it still receives
	// super-packets.
	fault := newFaultStage(cfg.Fault)
	gro := !cfg.NoGSO && gsoSupport()
	gso := gro && fault == nil
	opts := sockOpts{is6: ip.Is6(), rbuf: rbuf, wbuf: wbuf, group: cfg.Interface.IsValid(), gso: gso, gro: gro,
		recvTOS: cfg.ReportCE, ns: cfg.NetNS}
	if opts.group && (!ip.IsMulticast() || cfg.Interface.Unmap().Is4() != ip.Is4()) {
		return nil, fmt.Errorf("link: listen %v: a group link needs a multicast address and an interface address of its family", a)
	}
	set, err := newSockSet()
	if err != nil {
		return nil, fmt.Errorf("link: listen %v: %w", a, err)
	}
	// A group link binds the group address itself, not through package
	// net, which would bind a multicast listener to the wildcard address
	// (and then both clash with the devices bound to port 4791 and
	// receive their unicast packets).
	sock, la, err := openSocket(a, scope, opts, set)
	if err != nil {
		set.close(nil, func() {})
		return nil, fmt.Errorf("link: listen %v: %w", a, err)
	}
	if opts.group {
		var ifIndex int
		if ip.Is6() { // IPv4 names the interface by its address, which the kernel resolves
			err = cfg.NetNS.Do(func() (err error) {
				ifIndex, err = interfaceIndex(cfg.Interface.Unmap())
				return err
			})
		}
		if err == nil {
			err = joinGroup(sock.fd, ip, cfg.Interface.Unmap(), ifIndex)
		}
		if err != nil {
			set.close(nil, func() { unix.Close(sock.fd) })
			return nil, fmt.Errorf("link: join %v: %w", a, err)
		}
	}
	// The flow socket shares the port (SO_REUSEPORT); the bound socket
	// takes the option after its bind, which stays exclusive.
	flowOK := !opts.group && fault == nil &&
		unix.SetsockoptInt(sock.fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) == nil
	u := &UDP{
		flowOK:    flowOK,
		opts:      opts,
		sock:      sock,
		set:       set,
		laddr:     plain(la),
		bind:      ip,
		scope:     scope,
		wbuf:      wbuf,
		ns:        cfg.NetNS,
		rd:        newMmsg(),
		wr:        newMmsg(),
		stage:     make([]byte, 0, MaxBatch*stageSegment),
		ports:     make(map[uint16]*portSocket),
		fault:     fault,
		gso:       gso,
		deferICRC: cfg.DeferICRC,
	}
	if gro {
		u.gro = new(groReader)
	}
	if cfg.SameHost && !opts.group {
		if u.sh, err = startSameHost(u); err != nil {
			u.Close()
			return nil, fmt.Errorf("link: listen %v: same-host path: %w", a, err)
		}
	}
	if u.sh != nil || u.flowOK {
		u.set.wake = u.woken
	}
	u.fault.startRelease(u.flushHeld)
	return u, nil
}

// LocalAddr returns the address the link is bound to.
func (u *UDP) LocalAddr() netip.AddrPort { return u.laddr }

// Stats returns a snapshot of the link's counters.
func (u *UDP) Stats() Stats {
	s := u.stats.snapshot()
	if u.fault != nil {
		s.Fault = u.fault.stats.snapshot()
	}
	return s
}

// Close closes the link's sockets, which unblocks ReadBatch and WriteBatch.
// Later calls return nil.
func (u *UDP) Close() error {
	u.portsMu.Lock()
	if u.closed {
		u.portsMu.Unlock()
		return nil
	}
	u.closed = true
	ports := u.ports
	u.ports = nil
	u.portsMu.Unlock()
	var err error
	var quiesce func()
	if u.sh != nil {
		// The rings go once no read or write can touch them: the reader
		// and the writers leave their waits when the set closes, and
		// find it closed from then on.
		quiesce = func() {
			u.readMu.Lock()
			u.writeMu.Lock()
			u.sh.close()
			u.writeMu.Unlock()
			u.readMu.Unlock()
		}
	}
	u.set.close(quiesce, func() {
		for _, ps := range ports {
			if ps != nil {
				unix.Close(ps.sock.fd)
			}
		}
		if u.probe != nil {
			u.probe.close()
		}
		if fd := u.flowFD.Load() - 1; fd >= 0 {
			unix.Close(int(fd))
		}
		if cerr := unix.Close(u.sock.fd); cerr != nil {
			err = os.NewSyscallError("close", cerr)
		}
	})
	if u.fault != nil {
		u.fault.stop()
	}
	return err
}

// ReadBatch implements Link.ReadBatch.
func (u *UDP) ReadBatch(pkts []Packet) (int, error) { return u.read(pkts, true) }

// PollBatch implements Link.PollBatch.
func (u *UDP) PollBatch(pkts []Packet) (int, error) { return u.read(pkts, false) }

// read is ReadBatch, or with wait false PollBatch.
func (u *UDP) read(pkts []Packet, wait bool) (int, error) {
	n, err := u.readHeld(pkts, wait, false)
	if n > 0 {
		u.ReturnLent() // nothing was lent, but same-host slots were taken
	}
	return n, err
}

// ReadLent implements Link.ReadLent: with UDP_GRO, packets are lent from
// the super-packets the kernel wrote into the link's buffers.
func (u *UDP) ReadLent(pkts []Packet, wait bool) (int, error) { return u.readHeld(pkts, wait, true) }

// ReturnLent implements Link.ReturnLent.
func (u *UDP) ReturnLent() {
	if u.sh != nil {
		u.sh.release()
	}
	u.readMu.Unlock()
}

// readHeld reads a batch under readMu (lending GRO packets with lend) and
// returns with readMu still held when it returns packets; without wait it
// returns 0 when another read holds readMu.
func (u *UDP) readHeld(pkts []Packet, wait, lend bool) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	pkts = pkts[:min(len(pkts), MaxBatch)]
	if !u.lockRead(wait) {
		return 0, nil
	}
	n, err := u.readLocked(pkts, wait, lend)
	if n == 0 || err != nil {
		u.readMu.Unlock()
	}
	return n, err
}

// lockRead takes readMu; without wait, only if it is free.
func (u *UDP) lockRead(wait bool) bool {
	if !wait {
		return u.readMu.TryLock()
	}
	u.readMu.Lock()
	return true
}

// readLocked is read with u.readMu held; with lend, GRO packets and
// same-host slots are lent. With the same-host path, the rings and the
// socket take turns when both have packets.
func (u *UDP) readLocked(pkts []Packet, wait, lend bool) (int, error) {
	s := u.sh
	if s == nil {
		return u.readSocket(pkts, wait, lend)
	}
	for {
		// With same-host channels open, a read looks at the socket first
		// on one read in shmSocketPolls, whether the rings had packets
		// for the reads between or not: a look at the rings costs
		// nanoseconds, one at the socket a system call, and a stream on
		// the rings must not starve the socket. (Looking at the socket
		// after every read that found ring packets cost a latency
		// ping-pong a system call per message.)
		polled := false
		if s.skipped >= shmSocketPolls-1 {
			s.skipped, polled = 0, true
			s.socketPolls++
			if n, err := u.readSocket(pkts, false, lend); n > 0 || err != nil {
				return n, err
			}
		}
		if n := s.read(pkts, lend); n > 0 {
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
			return u.readSocket(pkts, false, lend)
		}
		// A producer rings the doorbell only for a consumer that said it
		// would wait, and said so before its last look at the ring.
		s.setWaiting(true)
		if s.ready() {
			s.setWaiting(false)
			continue
		}
		n, err := u.readSocket(pkts, true, lend)
		s.setWaiting(false)
		if err == errWoken {
			continue
		}
		return n, err
	}
}

// readSocket reads from the socket; u.readMu is held.
func (u *UDP) readSocket(pkts []Packet, wait, lend bool) (int, error) {
	if u.gro != nil {
		return u.readGRO(pkts, wait, lend)
	}
	m := u.rd
	for i := range pkts {
		m.setBuf(i, pkts[i].Buf[:cap(pkts[i].Buf)])
	}
	defer m.clearBufs(len(pkts))
	for {
		k, err := u.recv(len(pkts), wait)
		if k == 0 || err != nil { // without wait, or interrupted
			return 0, err
		}
		c := rxCount{flow: u.rdFlow, datagrams: uint64(k)}
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
		u.stats.addRx(&c)
		if n > 0 {
			return n, nil
		}
	}
}

// recv reads up to cnt datagrams into u.rd's messages; u.readMu is held.
// Without wait it returns 0 when none has arrived; with wait it returns 0
// when Interrupt ends the wait.
func (u *UDP) recv(cnt int, wait bool) (int, error) {
	if wait && u.set.takeInterrupt() {
		u.sock.unwatch() // the reader makes way for a busy poller
		return 0, nil
	}
	asked := cnt
	if !wait {
		asked = u.ask.next(cnt)
	}
	k, err := u.recvFrom(asked, wait)
	switch {
	case err == nil:
		if !wait {
			u.ask.got(asked, k, u.rd.first(0))
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

// Caps implements Link.Caps: a UDP link lends with UDP_GRO or the
// same-host path, segments with GSO, connects per-QP port sockets unless
// it has a fault stage, and writes cheaply while a same-host channel is
// open.
func (u *UDP) Caps() Caps {
	var c Caps
	if u.gro != nil || u.sh != nil {
		c |= CapLend
	}
	if u.sh != nil && u.deferICRC {
		c |= CapDeferICRC
	}
	if u.opts.gso {
		c |= CapSegment
	}
	if u.fault == nil {
		c |= CapConnectPort
	}
	if u.sh != nil && u.sh.open.Load() > 0 {
		c |= CapCheapWrite
	}
	return c
}

// Segments implements Link.Segments: packets to peer go out as
// UDP_SEGMENT runs when the socket segments, and peer is not a same-host device,
// whose ring takes one packet per slot whatever their sizes. A peer counts
// as same-host when it listens for same-host channels (its rendezvous
// socket exists), as the first packet to it will find.
func (u *UDP) Segments(peer netip.AddrPort) bool {
	u.writeMu.Lock()
	gso := u.gso
	u.writeMu.Unlock()
	if !gso {
		return false
	}
	return u.viaSocket(plain(peer))
}

// viaSocket reports whether packets to peer (plain) go over the socket
// rather than a same-host ring, as the first packet to peer will find.
func (u *UDP) viaSocket(peer netip.AddrPort) bool {
	if u.sh == nil || peer == u.laddr || peer.Addr().Is4() != u.laddr.Addr().Is4() {
		return true // sameHost.dial's rule: these go over the socket
	}
	_, err := os.Stat(socketName(u.sh.dir, peer))
	return err != nil
}

// ConnectPort implements Link.ConnectPort: it opens the socket for sport and
// connects it to peer unless packets to peer do not use it (a same-host
// peer, another address family, a fault stage's link).
func (u *UDP) ConnectPort(sport uint16, peer netip.AddrPort) {
	peer = plain(peer)
	if u.fault != nil || peer.Addr().Is4() != u.laddr.Addr().Is4() || !u.viaSocket(peer) {
		return
	}
	ps, src, _, err := u.portSocket(sport)
	if err != nil || ps == nil {
		return
	}
	u.writeMu.Lock()
	defer u.writeMu.Unlock()
	u.connectPort(ps, src, peer)
	u.openFlow(sport, peer)
}

// Interrupt implements Link.Interrupt: an eventfd in the link's epoll set
// ends a wait in progress, and a flag makes the next ReadBatch return at
// once if no wait was in progress. Either way the socket leaves the epoll
// set until the next ReadBatch that waits.
func (u *UDP) Interrupt() { u.set.interrupt() }

// datagram checks what the kernel says of received message i of m: not
// truncated, at least minSize bytes, from the link's address family. It
// counts a datagram it refuses in c, notes the socket's drop count, and
// returns the datagram's size, sender and control-message metadata (see
// rxMeta).
func (u *UDP) datagram(m *mmsg, i, minSize int, c *rxCount) (size int, peer netip.AddrPort, ce bool, seg int, ok bool) {
	h := &m.hs[i]
	size = int(h.n)
	if h.hdr.Flags&syscall.MSG_TRUNC != 0 {
		c.oversized++
		return 0, peer, false, 0, false
	}
	if size < minSize {
		c.malformed++
		return 0, peer, false, 0, false
	}
	peer, ok = m.name(i)
	if !ok || peer.Addr().Is4() != u.laddr.Addr().Is4() {
		c.malformed++
		return 0, peer, false, 0, false
	}
	ce, seg, drops := m.rxMeta(i)
	c.noteDrops(drops)
	return size, peer, ce, seg, true
}

// accept checks datagram i of m, which the kernel wrote into p.Buf's
// backing array, and on success reslices p.Buf to it and sets p.Peer.
func (u *UDP) accept(m *mmsg, i int, p *Packet, c *rxCount) bool {
	size, peer, ce, _, ok := u.datagram(m, i, minPacket, c)
	if !ok {
		return false
	}
	pkt := p.Buf[:size]
	want := u.rxIDs.next(peer)
	id, ok := checkICRCID(peer, u.laddr, pkt, want, &u.rxHdr)
	if !ok {
		c.icrc++
		return false
	}
	if id != want {
		c.recovered++
	}
	u.rxIDs.note(peer, id, id)
	p.Buf, p.Peer, p.CE = pkt, peer, ce
	c.packets++
	c.bytes += uint64(size)
	return true
}

// WriteBatch implements Link.WriteBatch.
func (u *UDP) WriteBatch(pkts []Packet) (int, error) {
	u.writeMu.Lock()
	defer u.writeMu.Unlock()
	switch {
	case u.fault != nil:
		return u.writeFault(pkts)
	case u.sh != nil:
		return u.writeSameHost(pkts)
	}
	return u.writeSocket(pkts)
}

// writeSameHost is WriteBatch with the same-host path: runs of packets to a
// peer with a channel go into its ring, the others to the socket.
func (u *UDP) writeSameHost(pkts []Packet) (int, error) {
	if u.set.closed.Load() {
		return 0, net.ErrClosed
	}
	s, done := u.sh, 0
	for done < len(pkts) {
		// A run: packets to one channel, or to peers without one. The
		// channel is looked up once per change of peer.
		peer := plain(pkts[done].Peer)
		o := s.channel(peer)
		end := done + 1
		for ; end < len(pkts); end++ {
			next := plain(pkts[end].Peer)
			if next != peer {
				if o != nil || s.channel(next) != nil {
					break
				}
				peer = next
			}
		}
		if o == nil {
			k, err := u.writeSocket(pkts[done:end])
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
			if err = u.check(p, u.laddr, true); err != nil {
				end = i
				break
			}
			bytes += uint64(p.size())
		}
		n := o.send(pkts[done:end], u.laddr, &u.txHdr)
		if n < end-done {
			n += u.waitRing(o, pkts[done+n:end])
		}
		if lost := end - done - n; lost > 0 {
			// A ring that stays full drops, as a full socket buffer
			// would; the transport resends.
			u.stats.sameHostDrops.Add(uint64(lost))
			if !o.alive(true) {
				s.drop(o)
			}
		}
		u.stats.sameHostSent.Add(uint64(n))
		u.stats.addTx(uint64(end-done), bytes, err)
		done = end
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// shmFullWait is how long a sender waits for room in a full same-host
// ring before it drops: a consumer that is alive drains a ring in
// microseconds, and waiting costs less than the retransmission a drop
// brings. It is short, so that two devices that both wait for each other
// (each worker writing, each reader blocked handing packets to it) drop
// rather than stall.
const shmFullWait = 200 * time.Microsecond

// waitRing puts pkts into o's full ring as room appears, for at most
// shmFullWait, and returns how many went in; u.writeMu is held.
func (u *UDP) waitRing(o *shmOut, pkts []Packet) int {
	n := 0
	deadline := time.Now().Add(shmFullWait)
	for n < len(pkts) && o.alive(false) && time.Now().Before(deadline) {
		runtime.Gosched()
		n += o.send(pkts[n:], u.laddr, &u.txHdr)
	}
	return n
}

// writeSocket is WriteBatch over the socket; u.writeMu is held.
func (u *UDP) writeSocket(pkts []Packet) (int, error) {
	sent, bytes := 0, uint64(0)
	var err error
	icmpRetries := 0
	for sent < len(pkts) && err == nil {
		// One group: consecutive packets with the same SrcPort, at most
		// MaxBatch, up to the first packet that cannot be sent.
		ps, src, fallback, perr := u.writePort(pkts[sent].SrcPort)
		if perr != nil {
			err = perr
			break
		}
		cnt := 0
		for sent+cnt < len(pkts) && cnt < MaxBatch && pkts[sent+cnt].SrcPort == pkts[sent].SrcPort {
			// A gathered payload is put together in Buf as the ICRC is
			// computed (flattenICRC), so Buf must have room for it.
			p := &pkts[sent+cnt]
			if err = u.check(p, src, p.size() <= cap(p.Buf)); err != nil {
				break
			}
			cnt++
		}
		if fallback {
			u.stats.portFallbacks.Add(uint64(cnt))
		}
		var conn netip.AddrPort // the peer rc is connected to
		if ps != nil && cnt > 0 {
			u.connectPort(ps, src, plain(pkts[sent].Peer))
			conn = ps.peer
		}
		var k int
		var b uint64
		var werr error
		refused := false
		if u.gso {
			k, b, refused, werr = u.sendRuns(ps, src, pkts[sent:sent+cnt])
		} else {
			k, b, werr = u.sendPlain(ps, src, pkts[sent:sent+cnt])
		}
		sent, bytes = sent+k, bytes+b
		if conn.IsValid() && k == 0 && icmpError(werr) && icmpRetries < MaxBatch {
			// A connected socket reports an ICMP error (port
			// unreachable, say) that an earlier datagram drew by
			// failing the next send, which never left (the kernel
			// checks the socket's error before it builds the
			// datagram). An unconnected socket never reports them:
			// send again, as it would have.
			icmpRetries++
			err = nil
			continue
		}
		if refused {
			// The kernel or the route will not segment (an IPsec
			// route, say): plain datagrams from now on, starting with
			// the super-packet it refused.
			u.gso = false
			err = nil
			continue
		}
		if werr != nil {
			err = werr // replaces a check error further on
		}
	}
	if err != nil && errors.Is(err, net.ErrClosed) {
		err = net.ErrClosed
	} else if err != nil && !errors.Is(err, ErrPacketSize) && !errors.Is(err, ErrAddrFamily) {
		err = fmt.Errorf("link: write %v: %w", u.laddr, err)
	}
	u.stats.addTx(uint64(sent), bytes, err)
	return sent, err
}

// check returns why p cannot be sent from src, or nil; gather says
// whether the path takes a gathered payload (Packet.sendable).
func (u *UDP) check(p *Packet, src netip.AddrPort, gather bool) error {
	if !p.sendable(gather) {
		return ErrPacketSize
	}
	if p.Peer.Addr().Unmap().Is4() != src.Addr().Is4() {
		return ErrAddrFamily
	}
	return nil
}

// sendPlain sends pkts (checked, at most MaxBatch) from src on ps's
// socket (nil: the link's own), one datagram each, and returns how many
// went and their bytes.
func (u *UDP) sendPlain(ps *portSocket, src netip.AddrPort, pkts []Packet) (int, uint64, error) {
	m := u.wr
	defer m.clearBufs(len(pkts))
	rc, conn, ids := u.sockOf(ps), ps.conn(), ps.idCounter()
	if ps != nil && ps.seg != 0 {
		// The kernel refused a super-packet (u.gso turned off): the
		// socket's segment size goes too, or its plain datagrams would
		// be refused as well.
		if err := m.setSegment(rc, 0); err != nil {
			return 0, 0, err
		}
		ps.seg = 0
	}
	for i := range pkts {
		p := &pkts[i]
		dst := plain(p.Peer)
		f := sendFields(src, dst)
		f.Cache = &u.txHdr
		if ids != nil {
			f.ID = ids.next + uint16(i)
		}
		flattenICRC(p, &f)
		m.setName(i, dst, u.scope)
		m.connected(i, dst == conn)
		m.setBuf(i, p.Buf)
	}
	sent, bytes := 0, uint64(0)
	lone := len(pkts) == 1 && u.loneSend(rc, ps, m, 0)
	for sent < len(pkts) {
		k, err := u.writeTo(rc, sent, len(pkts)-sent, lone)
		for i := range pkts[sent : sent+k] {
			bytes += uint64(len(pkts[sent+i].Buf))
		}
		sent += k
		if ids != nil {
			ids.next += uint16(k)
		}
		if err != nil {
			if ids != nil {
				ids.known = false // the failed datagram may have taken an ID
			}
			return sent, bytes, err
		}
	}
	return sent, bytes, nil
}

// sendRuns sends pkts (checked, at most MaxBatch) from src on ps's socket
// (nil: the link's own), each run gsoRun finds as one UDP_SEGMENT
// super-packet whose segment k carries its ICRC over IPv4 ID k, and
// returns how many packets went and their bytes. refused reports that the error came from a send the
// kernel would not make with a segment size (EIO, EINVAL): the caller
// should send plain datagrams.
func (u *UDP) sendRuns(ps *portSocket, src netip.AddrPort, pkts []Packet) (sent int, bytes uint64, refused bool, err error) {
	m := u.wr
	defer m.clearBufs(len(pkts))
	rc, conn, ids := u.sockOf(ps), ps.conn(), ps.idCounter()
	maxBytes := maxGSOBytes(src.Addr().Is6())
	stage := u.stage[:0]
	nm := 0
	var count idCount // the IDs the messages get, counted ahead of ids
	if ids != nil {
		count = *ids
	}
	seg0 := 0 // the segment size of the first message
	for i := 0; i < len(pkts); nm++ {
		n := gsoRun(pkts[i:], maxSegments, maxBytes)
		dst := plain(pkts[i].Peer)
		f := sendFields(src, dst)
		f.Cache = &u.txHdr
		base := count.next // 0 without ids
		if ids != nil {
			count.advance(n)
		}
		seg := pkts[i].size()
		if nm == 0 {
			seg0 = seg
		}
		if n > 1 && seg <= stageSegment && len(stage)+n*seg <= cap(stage) {
			// One I/O vector for the super-packet: its segments put
			// together one after another in the stage.
			start := len(stage)
			for k := range n {
				if f.Src.Is4() {
					f.ID = base + uint16(k)
				}
				stage = stage[:len(stage)+flattenInto(stage[len(stage):cap(stage)], &pkts[i+k], &f)]
			}
			m.setBuf(i, stage[start:])
			m.setMsg(nm, i, 1, n, dst, u.scope, seg)
			m.connected(nm, dst == conn)
			i += n
			continue
		}
		for k := range n {
			p := &pkts[i+k]
			if f.Src.Is4() {
				f.ID = base + uint16(k)
			}
			flattenICRC(p, &f)
			m.setBuf(i+k, p.Buf)
		}
		m.setMsg(nm, i, n, n, dst, u.scope, seg)
		m.connected(nm, dst == conn)
		i += n
	}
	lone := nm == 1 && u.loneSend(rc, ps, m, seg0)
	if !lone && ps != nil && ps.seg != 0 {
		m.plainSegments(nm)
	}
	for off := 0; off < nm; {
		k, werr := u.writeTo(rc, off, nm-off, lone)
		for _, c := range m.segs[off : off+k] {
			for i := sent; i < sent+int(c); i++ {
				bytes += uint64(pkts[i].size()) // a staged packet still has its payload aside
			}
			sent += int(c)
			if ids != nil {
				ids.advance(int(c))
			}
		}
		off += k
		if werr != nil {
			if ids != nil {
				ids.known = false // the failed message may have taken an ID
			}
			refused = (m.segs[off] > 1 || lone && ps.seg != 0) && (errors.Is(werr, syscall.EIO) || errors.Is(werr, syscall.EINVAL))
			return sent, bytes, refused, werr
		}
	}
	return sent, bytes, false, nil
}

// sockOf returns ps's socket, or the link's own for nil.
func (u *UDP) sockOf(ps *portSocket) *sockFD {
	if ps == nil {
		return u.sock
	}
	return ps.sock
}

// writeTo is mmsg.writeTo on the link's write state, counting a lone
// send that went (Stats.LoneSends).
func (u *UDP) writeTo(rc *sockFD, off, cnt int, lone bool) (int, error) {
	k, err := u.wr.writeTo(rc, off, cnt, lone)
	if lone && k > 0 {
		u.stats.loneSends.Add(1)
	}
	return k, err
}

// portConn returns the socket to send from for a packet's SrcPort and the
// address that socket sends from. fallback reports that the packet asked for
// another port and could not have it.
func (u *UDP) portConn(sport uint16) (rc *sockFD, src netip.AddrPort, fallback bool, err error) {
	ps, src, fallback, err := u.portSocket(sport)
	return u.sockOf(ps), src, fallback, err
}

// writePort is portSocket for writeSocket, u.writeMu held: the port socket
// the last write used is kept (lastPort), as the packets of a connection
// come from one port, and found again without portsMu and a map lookup. A
// port socket, once open, stays until the link closes, and a write on it
// after Close fails with net.ErrClosed all the same (sockFD.Write).
func (u *UDP) writePort(sport uint16) (ps *portSocket, src netip.AddrPort, fallback bool, err error) {
	if c := &u.lastPort; c.ps != nil && c.sport == sport {
		return c.ps, c.src, false, nil
	}
	ps, src, fallback, err = u.portSocket(sport)
	if ps != nil && !fallback && err == nil {
		u.lastPort = lastPort{sport, ps, src}
	}
	return ps, src, fallback, err
}

// lastPort is the port socket writePort found last.
type lastPort struct {
	sport uint16
	ps    *portSocket // nil: none yet
	src   netip.AddrPort
}

// portSocket returns the port socket for a packet's SrcPort (nil: the
// link's own socket) and the address it sends from. fallback reports that
// the packet asked for another port and could not have it.
func (u *UDP) portSocket(sport uint16) (ps *portSocket, src netip.AddrPort, fallback bool, err error) {
	if sport == 0 || sport == u.laddr.Port() {
		return nil, u.laddr, false, nil
	}
	u.portsMu.Lock()
	defer u.portsMu.Unlock()
	if u.closed {
		return nil, netip.AddrPort{}, false, net.ErrClosed
	}
	ps, ok := u.ports[sport]
	if !ok && len(u.ports) < maxPortSockets {
		ps = u.openPort(sport) // nil if the port cannot be bound; remembered
		u.ports[sport] = ps
	}
	if ps == nil {
		return nil, u.laddr, true, nil
	}
	return ps, netip.AddrPortFrom(u.laddr.Addr(), sport), false, nil
}

// connectPort connects ps, which sends from src, to dst (plain), the peer of
// the first packet it sends, and for IPv4 makes sure its ID counter is
// known (idprobe_linux.go); u.writeMu is held. A socket that cannot be
// connected, or whose counter cannot be learned, is left (or made)
// unconnected for good.
func (u *UDP) connectPort(ps *portSocket, src, dst netip.AddrPort) {
	if ps.unconnected || (ps.peer.IsValid() && (ps.ids.known || dst.Addr().Is6())) {
		return
	}
	u.set.ops.RLock() // keeps the descriptors open (sockSet.close)
	defer u.set.ops.RUnlock()
	if u.set.closed.Load() {
		return
	}
	is4 := dst.Addr().Is4()
	if u.noConnect || u.bind.IsMulticast() || dst.Addr().IsMulticast() || (is4 && u.probe == nil && !u.openProbe()) {
		u.leaveUnconnected(ps)
		return
	}
	if !ps.peer.IsValid() {
		if err := unix.Connect(ps.sock.fd, sockaddr(dst, u.scope)); err != nil {
			u.leaveUnconnected(ps)
			return
		}
		ps.peer = dst
		if !is4 {
			ps.counted = true
			u.stats.connectedPorts.Add(1)
			return
		}
	}
	if ps.seg != 0 {
		// The probes are plain datagrams or carry their own segment size.
		if err := unix.SetsockoptInt(ps.sock.fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT, 0); err != nil {
			disconnect(ps.sock.fd)
			ps.peer = netip.AddrPort{}
			u.leaveUnconnected(ps)
			return
		}
		ps.seg = 0
	}
	ids, err := u.probe.learn(ps.sock.fd, src, u.gso)
	if err != nil {
		disconnect(ps.sock.fd) // its datagrams go out with ID 0 again
		ps.peer = netip.AddrPort{}
		u.leaveUnconnected(ps)
		return
	}
	if !ps.counted {
		ps.counted = true
		u.stats.connectedPorts.Add(1)
	}
	ps.ids = ids
}

// leaveUnconnected marks ps as staying unconnected for good and counts it
// so (no longer as connected, if it was); u.writeMu is held.
func (u *UDP) leaveUnconnected(ps *portSocket) {
	ps.unconnected = true
	u.stats.unconnectedPorts.Add(1)
	if ps.counted {
		ps.counted = false
		u.stats.connectedPorts.Add(^uint64(0))
	}
}

// icmpError reports whether err is one a connected UDP socket reports for
// an ICMP error an earlier datagram drew (__udp4_lib_err, __udp6_lib_err).
func icmpError(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTDOWN)
}

// disconnect dissolves a UDP socket's association (connect(2) with
// AF_UNSPEC).
func disconnect(fd int) {
	sa := unix.RawSockaddr{Family: unix.AF_UNSPEC}
	unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
}

// openProbe opens the link's probe socket and reports whether it could;
// u.writeMu is held.
func (u *UDP) openProbe() bool {
	p, err := newIDProbe(u.laddr.Addr(), u.ns)
	if err != nil {
		u.noConnect = true
		return false
	}
	u.probe = p
	return true
}

// openPort opens a send-only socket bound to (local IP, sport), or returns
// nil if it cannot.
func (u *UDP) openPort(sport uint16) *portSocket {
	a := netip.AddrPortFrom(u.bind, sport)
	sock, _, err := openSocket(a, u.scope, sockOpts{is6: a.Addr().Is6(), wbuf: u.wbuf, sendOnly: true, gso: u.gso, ns: u.ns}, u.set)
	if err != nil {
		return nil
	}
	return &portSocket{sock: sock}
}

// interfaceIndex returns the index of the interface holding addr.
func interfaceIndex(addr netip.Addr) (int, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, err
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr {
					return ifc.Index, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("no interface holds %v", addr)
}
