package udp

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
)

// sockOpts are the options a link's sockets get before bind.
type sockOpts struct {
	is6        bool
	rbuf, wbuf int       // SO_RCVBUF, SO_SNDBUF; 0 leaves the default
	sendOnly   bool      // a per-port socket: shares its port, receives nothing
	group      bool      // a multicast group socket: shares its address and port
	gso        bool      // sends UDP_SEGMENT super-packets: UDP checksums on IPv4 too
	gro        bool      // receives with UDP_GRO
	recvTOS    bool      // reports each datagram's TOS or traffic class (Config.ReportCE)
	reusePort  bool      // a flow socket: shares the link's address and port (flowsock_linux.go)
	ns         *netns.NS // the network namespace to make the socket in; nil: the process's
}

// dropAll is a classic BPF program that accepts no bytes of any packet:
// "ret #0". Attached to a send-only socket, it makes the kernel discard
// everything that arrives there before it is queued.
var dropAll = []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}

// apply sets the options on a socket that is not yet bound.
func (o sockOpts) apply(fd int) error {
	// DF on every packet: RoCE is never fragmented, and an unconnected DF
	// socket sends IPv4 ID 0, which the ICRC covers (a connected one
	// counts: idprobe_linux.go).
	if o.is6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return fmt.Errorf("IPV6_MTU_DISCOVER: %w", err)
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1); err != nil {
			return fmt.Errorf("IPV6_DONTFRAG: %w", err)
		}
	} else {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			return fmt.Errorf("IP_MTU_DISCOVER: %w", err)
		}
		// UDP checksum 0 on IPv4, as rxe sends (RFC 768 allows it; the
		// ICRC protects the packet, and masks the checksum field). A
		// payload corrupted after a checksum was computed then reaches
		// the ICRC check and is counted there, instead of being dropped
		// by the receiving kernel. IPv6 keeps its checksum, which is
		// mandatory (RFC 8200 §8.1). A socket sending UDP_SEGMENT
		// super-packets must keep it too: the kernel refuses them
		// (EINVAL) from a socket with SO_NO_CHECK.
		if !o.gso {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1); err != nil {
				return fmt.Errorf("SO_NO_CHECK: %w", err)
			}
		}
	}
	if o.gro && !o.sendOnly {
		// Receive a GSO super-packet that arrives whole as one datagram
		// with its segment size (gso_linux.go).
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1); err != nil {
			return fmt.Errorf("UDP_GRO: %w", err)
		}
	}
	if o.rbuf > 0 {
		if err := setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, o.rbuf); err != nil {
			return fmt.Errorf("SO_RCVBUF: %w", err)
		}
	}
	if o.wbuf > 0 {
		if err := setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, o.wbuf); err != nil {
			return fmt.Errorf("SO_SNDBUF: %w", err)
		}
	}
	if !o.sendOnly {
		// Report the socket's count of dropped datagrams with each one
		// received, for Stats.SocketDrops.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1); err != nil {
			return fmt.Errorf("SO_RXQ_OVFL: %w", err)
		}
	}
	if o.recvTOS && !o.sendOnly {
		// Report each datagram's TOS or traffic class, for Packet.CE.
		lvl, opt := unix.IPPROTO_IP, unix.IP_RECVTOS
		if o.is6 {
			lvl, opt = unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS
		}
		if err := unix.SetsockoptInt(fd, lvl, opt, 1); err != nil {
			return fmt.Errorf("IP_RECVTOS/IPV6_RECVTCLASS: %w", err)
		}
	}
	if o.is6 && !o.sendOnly {
		// rxe sends IPv6 with UDP checksum 0 too (its tunnel socket
		// accepts that, RFC 6936); without this the kernel drops those
		// datagrams as checksum errors. The ICRC still checks them.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1); err != nil {
			return fmt.Errorf("UDP_NO_CHECK6_RX: %w", err)
		}
	}
	if o.group {
		// Every socket bound to a multicast group and port with
		// SO_REUSEADDR gets its own copy of each datagram to the group:
		// that is how all goroce devices on a host receive it.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return fmt.Errorf("SO_REUSEADDR: %w", err)
		}
	}
	if o.reusePort {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return fmt.Errorf("SO_REUSEPORT: %w", err)
		}
	}
	if o.sendOnly {
		for _, opt := range []int{unix.SO_REUSEADDR, unix.SO_REUSEPORT} {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, 1); err != nil {
				return fmt.Errorf("SO_REUSEADDR/SO_REUSEPORT: %w", err)
			}
		}
		prog := unix.SockFprog{Len: uint16(len(dropAll)), Filter: &dropAll[0]}
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
			return fmt.Errorf("SO_ATTACH_FILTER: %w", err)
		}
	}
	return nil
}

// setBuffer sets a socket buffer size, past the sysctl limit if the process
// may (CAP_NET_ADMIN), else up to it.
func setBuffer(fd, force, plain, n int) error {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, n) == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, n)
}

// joinGroup makes the socket a member of a multicast group on the
// interface that holds ifAddr (IP_ADD_MEMBERSHIP, IPV6_JOIN_GROUP).
func joinGroup(fd int, group, ifAddr netip.Addr, ifIndex int) error {
	if group.Is4() {
		mreq := &unix.IPMreq{Multiaddr: group.As4(), Interface: ifAddr.As4()}
		if err := unix.SetsockoptIPMreq(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mreq); err != nil {
			return fmt.Errorf("IP_ADD_MEMBERSHIP: %w", err)
		}
		return nil
	}
	mreq := &unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(ifIndex)}
	if err := unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, mreq); err != nil {
		return fmt.Errorf("IPV6_JOIN_GROUP: %w", err)
	}
	return nil
}
