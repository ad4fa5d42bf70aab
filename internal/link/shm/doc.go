// Package shm is goroce's same-host path: a mux in front of a UDP link
// that moves packets to goroce links of the same user and network
// namespace through shared-memory rings instead of the socket, and every
// other packet through the UDP link.
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
// SameHostSlots slots of a length, the UDP source port and one packet. The
// producer fills slots and publishes its index; the consumer lends the
// slots to the device (link.CapLend) and publishes its index when they come back.
// A consumer about to wait sets its flag and looks again; a producer that
// finds the flag set clears it and rings the doorbell, which the UDP
// link's reader watches (udp.Link.Watch) in the same wait as its socket. A busy poller never sets the flag, so no system call is
// made at all while polling. A full ring drops the packet (counted in
// stats.SameHostDrops), as a full socket buffer would, and the transport
// resends it. Everything read from shared memory is checked: indices that
// move backwards or too far, a length out of range or a wrong ICRC end the
// channel or drop the packet, never a read outside the ring.
//
// A channel ends when either side closes it or exits: the consumer marks
// the ring closed when its link closes, and the producer sees that (or,
// when the consumer died, the dial socket's end-of-file once the ring
// fills) and goes back to UDP.

package shm

import (
	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/netns"
)

// Inner is the link a Mux stands in front of: it carries the packets of
// peers without a ring, and its reader's wait also watches the rings'
// doorbells (udp.Link).
type Inner interface {
	link.Link
	// Watch adds a descriptor to the reader's wait; Unwatch removes it.
	Watch(fd int) error
	Unwatch(fd int)
	// SetWake sets what a waiting read asks when a watched descriptor
	// wakes it: true ends the read with link.ErrWoken.
	SetWake(func() bool)
}

// Config configures New.
type Config struct {
	// Dir is the run directory the rendezvous sockets live under: it
	// must be a directory of the user, mode 0700 (it is made if it does
	// not exist).
	Dir string
	// NetNS is the network namespace of the inner link's sockets; nil:
	// the process's own. Its inode names the subdirectory of Dir.
	NetNS *netns.NS
	// DeferICRC lends ring packets with their ICRC unchecked, for the
	// borrower to check as it places the payload (link.CapDeferICRC).
	DeferICRC bool
}
