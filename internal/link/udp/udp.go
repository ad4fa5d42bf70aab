// Package udp is goroce's link over UDP sockets on port 4791 (RoCEv2): an
// unconnected socket bound to one local address, batched with recvmmsg and
// sendmmsg, with UDP GSO and GRO where the kernel has them, per-QP
// source-port sockets, and a flow socket for the first connection. It is
// Linux rxe's rxe_net.c; it builds only on Linux, and Listen returns
// errors.ErrUnsupported elsewhere.
package udp

import (
	"net/netip"

	"github.com/goroce/goroce/internal/netns"
)

// Config configures Listen. Its zero value is not enough: Addr must name a
// local IP address.
type Config struct {
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
	// checksum 0, as rxe's do.
	NoGSO bool

	// PlainSend sends every packet as a datagram of its own, without
	// GSO, so IPv4 datagrams leave with checksum 0 as rxe's do, and opens
	// no flow socket; receive aggregation stays on. A fault stage in
	// front of the link (link/fault) needs it: it decides each packet's
	// fate alone, and sends through WriteSealed.
	PlainSend bool

	// NetNS, if not nil, is the network namespace the link's sockets are
	// made in (the per-port ones too, when they are opened); Addr is an
	// address there. Nil means the process's own namespace.
	NetNS *netns.NS

	// ReportCE has the socket report each datagram's IPv4 TOS or IPv6
	// traffic class (IP_RECVTOS, IPV6_RECVTCLASS), so that Packet.CE
	// tells which arrived marked ECN Congestion Experienced. Off, CE is
	// never set on packets read from the socket: the control message
	// costs the kernel time on every datagram's way to the reader, and
	// nothing in goroce acts on the mark yet.
	ReportCE bool
}
