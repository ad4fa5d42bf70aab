//go:build linux

package udp

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

const defaultSocketBuffer = 4 << 20

// stageSegment is the largest segment of a super-packet that sendRuns puts
// together in the link's stage, so that the kernel copies one I/O vector
// instead of one per segment.
const stageSegment = 512

// maxPortSockets caps the send-only sockets a UDP link opens for per-QP
// source ports.
const maxPortSockets = 1024

// Link is a link.Link over a UDP socket: an unconnected socket bound to one local
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
// them: 0 from an unconnected socket with DF set (the kernel's ip_select_ident_segs gives a counter only to connected sockets), the
// next value of its counter from a connected per-QP port socket (see
// below); TestWireHeaders and TestGSOSegmentIDs check both on the wire.
//
// GSO and GRO (gso_linux.go): runs of packets with one destination, source
// port and size leave as UDP_SEGMENT super-packets, segment k with its
// ICRC over IPv4 ID k (the ID the kernel gives it when it segments);
// super-packets that arrive whole (UDP_GRO) are split and each packet
// checked with ID k first. Config.NoGSO turns both off.
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
// stats.PortFallbacks. The ICRC always covers the port the packet really
// leaves from. Consecutive packets with the same SrcPort go out in one
// sendmmsg. A port socket is connected to the peer of the first packet it
// sends, so that the kernel keeps its route, once the link has learned
// its IPv4 ID counter (idprobe_linux.go); stats.ConnectedPorts and
// UnconnectedPorts count how that went.
//
// The flow socket: the first connection (ConnectPort) also gets a socket
// of its own for the datagrams it receives, bound to the link's address
// and port and connected to the peer's address and the connection's
// source port, so that the kernel finds it by early demux; the link reads
// it along with its bound socket (flowsock_linux.go, stats.FlowSockets).
//
// Packet.CE reports the ECN bits of each datagram received (IP_RECVTOS,
// IPV6_RECVTCLASS). A sealed packet marked CE (WriteSealed, for a fault
// stage) leaves with TOS or traffic class 0x03, set by a control message to
// sendmmsg.
//
// A UDP link starts no goroutines. Its sockets stay out of the Go
// netpoller's epoll set (sockfd_linux.go): ReadBatch waits in the
// netpoller on an epoll set of the link's own, from which Interrupt takes
// the socket; Close unblocks every wait. Other descriptors can join that
// set (Watch, SetWake): the same-host mux waits for its rings' doorbells
// there, in the same wait as for the socket.
type Link struct {
	sock  *sockFD
	set   *sockSet       // the eventfds and close lock of sock and the port sockets
	laddr netip.AddrPort // unmapped, no zone
	bind  netip.Addr     // the IP as bound, with its zone
	scope uint32         // IPv6 scope (interface index) of a link-local address
	wbuf  int            // SO_SNDBUF, for the per-port sockets too
	ns    *netns.NS      // the sockets' network namespace; nil: the process's
	opts  sockOpts       // the options the bound socket was opened with

	// rd is the reader's state, under its lock.
	rd struct {
		sync.Mutex
		m        *mmsg
		hdr      wire.HeaderCache // the received packets' ICRC headers
		ask      readAsk          // how many datagrams a poll asks for
		ids      idGuess          // the IPv4 IDs the peers' next datagrams most likely carry
		turns    flowTurns        // which socket a poll looks at, with a flow socket
		flow     *sockFD          // the flow socket, once the reader took it over (adoptFlow)
		fromFlow bool             // the last datagrams read came from the flow socket
		gro      *groReader       // nil: the socket receives without UDP_GRO
	}

	// wr is the writers' state, under its lock.
	wr struct {
		sync.Mutex
		m         *mmsg
		stage     []byte           // super-packets of small segments put together (sendRuns)
		gso       bool             // send runs as UDP_SEGMENT super-packets
		hdr       wire.HeaderCache // the sent packets' ICRC headers
		probe     *idProbe         // learns connected port sockets' ID counters
		noConnect bool             // port sockets stay unconnected (the probe socket would not open)
		lastPort  lastPort         // the port socket the last write used (writePort)
		flowTried bool             // the link opened, or tried to open, its flow socket
	}

	// ports are the per-QP source-port sockets, under their lock.
	ports struct {
		sync.Mutex
		m      map[uint16]*portSocket // nil value: could not bind
		closed bool
	}

	// The flow socket (flowsock_linux.go): flowNew holds it from its
	// opening until the reader takes it over; flowOK says the link may
	// open one, and flowFD is its descriptor plus one, for Close (0: none;
	// stored under the sockets' lock, sockSet.ops, shared, and read under
	// it exclusive).
	flowNew atomic.Pointer[sockFD]
	flowOK  bool
	flowFD  atomic.Int32

	// wake, if set (SetWake, before the link is read), is asked when the
	// reader's wait is woken by a watched descriptor.
	wake func() bool

	stats *stats.Counters
	// drops are the highest SO_RXQ_OVFL counts a datagram of the bound
	// socket and of the flow socket reported: the kernel's counts are
	// cumulative, one per socket (and 32 bits: they wrap after 2^32
	// drops, which the link does not track).
	drops struct{ sock, flow atomic.Uint64 }
}

var _ link.Sealer = (*Link)(nil)

// Listen opens a UDP link bound to cfg.Addr.
func Listen(cfg Config) (*Link, error) {
	a := cfg.Addr
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
	gro := !cfg.NoGSO && gsoSupport()
	gso := gro && !cfg.PlainSend
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
	flowOK := !opts.group && !cfg.PlainSend &&
		unix.SetsockoptInt(sock.fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) == nil
	u := &Link{
		flowOK: flowOK,
		opts:   opts,
		sock:   sock,
		set:    set,
		laddr:  link.Plain(la),
		bind:   ip,
		scope:  scope,
		wbuf:   wbuf,
		ns:     cfg.NetNS,
		stats:  stats.New(),
	}
	u.rd.m, u.wr.m = newMmsg(), newMmsg()
	u.wr.stage = make([]byte, 0, link.MaxBatch*stageSegment)
	u.wr.gso = gso
	u.ports.m = make(map[uint16]*portSocket)
	if gro {
		u.rd.gro = new(groReader)
	}
	if u.flowOK {
		u.set.wake = u.woken
	}
	return u, nil
}

// LocalAddr returns the address the link is bound to.
func (u *Link) LocalAddr() netip.AddrPort { return u.laddr }

// Stats returns a snapshot of the link's counters.
func (u *Link) Stats() link.Stats {
	s := u.stats.Snapshot()
	s[stats.SocketDrops] = u.drops.sock.Load() + u.drops.flow.Load()
	return s
}

// Caps implements link.Link.Caps: a UDP link lends with UDP_GRO, segments
// with GSO, and connects per-QP port sockets.
func (u *Link) Caps() link.Caps {
	c := link.CapConnectPort
	if u.rd.gro != nil {
		c |= link.CapLend
	}
	if u.opts.gso {
		c |= link.CapSegment
	}
	return c
}

// Close closes the link's sockets, which unblocks ReadBatch and WriteBatch.
// Later calls return nil.
func (u *Link) Close() error {
	u.ports.Lock()
	if u.ports.closed {
		u.ports.Unlock()
		return nil
	}
	u.ports.closed = true
	ports := u.ports.m
	u.ports.m = nil
	u.ports.Unlock()
	var err error
	u.set.close(nil, func() {
		for _, ps := range ports {
			if ps != nil {
				unix.Close(ps.sock.fd)
			}
		}
		if u.wr.probe != nil {
			u.wr.probe.close()
		}
		if fd := u.flowFD.Load() - 1; fd >= 0 {
			unix.Close(int(fd))
		}
		if cerr := unix.Close(u.sock.fd); cerr != nil {
			err = os.NewSyscallError("close", cerr)
		}
	})
	return err
}

// Interrupt implements link.Link.Interrupt: an eventfd in the link's epoll
// set ends a wait in progress, and a flag makes the next ReadBatch return
// at once if no wait was in progress. Either way the socket leaves the
// epoll set until the next ReadBatch that waits.
func (u *Link) Interrupt() { u.set.interrupt() }

// Watch adds fd, readable when it has something for the link's owner, to
// the epoll set the link's reader waits on: a wait that fd wakes asks the
// function SetWake gave, and ends with link.ErrWoken when it says so. The
// same-host mux (link/shm) watches its rings' doorbells so, and waits for
// rings and socket in one wait.
func (u *Link) Watch(fd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(u.set.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// Unwatch takes fd out of the reader's epoll set (Watch).
func (u *Link) Unwatch(fd int) {
	if !u.set.closed.Load() {
		unix.EpollCtl(u.set.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	}
}

// SetWake sets the function a waiting read asks when a watched descriptor
// wakes it (Watch): true ends the read with link.ErrWoken. It must be set
// before the link is read, and runs on the reader's goroutine.
func (u *Link) SetWake(wake func() bool) {
	u.wake = wake
	u.set.wake = u.woken
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
