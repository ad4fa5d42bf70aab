//go:build linux

package udp

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/stats"
)

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

// Segments implements link.Link.Segments: packets go out as UDP_SEGMENT
// runs while the socket segments (the kernel may refuse it for a route,
// and the link then sends plain datagrams from there on).
func (u *Link) Segments(netip.AddrPort) bool {
	u.wr.Lock()
	defer u.wr.Unlock()
	return u.wr.gso
}

// ConnectPort implements link.Link.ConnectPort: it opens the socket for
// sport and connects it to peer, unless peer is of another address family,
// and opens the flow socket for the link's first connection.
func (u *Link) ConnectPort(sport uint16, peer netip.AddrPort) {
	peer = link.Plain(peer)
	if peer.Addr().Is4() != u.laddr.Addr().Is4() {
		return
	}
	ps, src, _, err := u.portSocket(sport)
	if err != nil || ps == nil {
		return
	}
	u.wr.Lock()
	defer u.wr.Unlock()
	u.connectPort(ps, src, peer)
	u.openFlow(sport, peer)
}

// portConn returns the socket to send from for a packet's SrcPort and the
// address that socket sends from. fallback reports that the packet asked for
// another port and could not have it.
func (u *Link) portConn(sport uint16) (rc *sockFD, src netip.AddrPort, fallback bool, err error) {
	ps, src, fallback, err := u.portSocket(sport)
	return u.sockOf(ps), src, fallback, err
}

// writePort is portSocket for writeSocket, u.wr held: the port socket
// the last write used is kept (lastPort), as the packets of a connection
// come from one port, and found again without portsMu and a map lookup. A
// port socket, once open, stays until the link closes, and a write on it
// after Close fails with net.ErrClosed all the same (sockFD.Write).
func (u *Link) writePort(sport uint16) (ps *portSocket, src netip.AddrPort, fallback bool, err error) {
	if c := &u.wr.lastPort; c.ps != nil && c.sport == sport {
		return c.ps, c.src, false, nil
	}
	ps, src, fallback, err = u.portSocket(sport)
	if ps != nil && !fallback && err == nil {
		u.wr.lastPort = lastPort{sport, ps, src}
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
func (u *Link) portSocket(sport uint16) (ps *portSocket, src netip.AddrPort, fallback bool, err error) {
	if sport == 0 || sport == u.laddr.Port() {
		return nil, u.laddr, false, nil
	}
	u.ports.Lock()
	defer u.ports.Unlock()
	if u.ports.closed {
		return nil, netip.AddrPort{}, false, net.ErrClosed
	}
	ps, ok := u.ports.m[sport]
	if !ok && len(u.ports.m) < maxPortSockets {
		ps = u.openPort(sport) // nil if the port cannot be bound; remembered
		u.ports.m[sport] = ps
	}
	if ps == nil {
		return nil, u.laddr, true, nil
	}
	return ps, netip.AddrPortFrom(u.laddr.Addr(), sport), false, nil
}

// connectPort connects ps, which sends from src, to dst (plain), the peer of
// the first packet it sends, and for IPv4 makes sure its ID counter is
// known (idprobe_linux.go); u.wr is held. A socket that cannot be
// connected, or whose counter cannot be learned, is left (or made)
// unconnected for good.
func (u *Link) connectPort(ps *portSocket, src, dst netip.AddrPort) {
	if ps.unconnected || (ps.peer.IsValid() && (ps.ids.known || dst.Addr().Is6())) {
		return
	}
	u.set.ops.RLock() // keeps the descriptors open (sockSet.close)
	defer u.set.ops.RUnlock()
	if u.set.closed.Load() {
		return
	}
	is4 := dst.Addr().Is4()
	if u.wr.noConnect || u.bind.IsMulticast() || dst.Addr().IsMulticast() || (is4 && u.wr.probe == nil && !u.openProbe()) {
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
			u.stats.Inc(stats.ConnectedPorts)
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
	ids, err := u.wr.probe.learn(ps.sock.fd, src, u.wr.gso)
	if err != nil {
		disconnect(ps.sock.fd) // its datagrams go out with ID 0 again
		ps.peer = netip.AddrPort{}
		u.leaveUnconnected(ps)
		return
	}
	if !ps.counted {
		ps.counted = true
		u.stats.Inc(stats.ConnectedPorts)
	}
	ps.ids = ids
}

// leaveUnconnected marks ps as staying unconnected for good and counts it
// so (no longer as connected, if it was); u.wr is held.
func (u *Link) leaveUnconnected(ps *portSocket) {
	ps.unconnected = true
	u.stats.Inc(stats.UnconnectedPorts)
	if ps.counted {
		ps.counted = false
		u.stats.Add(stats.ConnectedPorts, ^uint64(0))
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
// u.wr is held.
func (u *Link) openProbe() bool {
	p, err := newIDProbe(u.laddr.Addr(), u.ns)
	if err != nil {
		u.wr.noConnect = true
		return false
	}
	u.wr.probe = p
	return true
}

// openPort opens a send-only socket bound to (local IP, sport), or returns
// nil if it cannot.
func (u *Link) openPort(sport uint16) *portSocket {
	a := netip.AddrPortFrom(u.bind, sport)
	sock, _, err := openSocket(a, u.scope, sockOpts{is6: a.Addr().Is6(), wbuf: u.wbuf, sendOnly: true, gso: u.wr.gso, ns: u.ns}, u.set)
	if err != nil {
		return nil
	}
	return &portSocket{sock: sock}
}
