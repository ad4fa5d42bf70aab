// Package link is the contract between a goroce device and the backends
// that carry its RoCEv2 packets, as gVisor's stack.LinkEndpoint is: batched
// reads and writes, ownership of buffers, and the capabilities a backend
// declares (Caps). A link generates the ICRC of every packet it sends and
// checks it on every packet it receives, because only it knows the IP and
// UDP header fields the ICRC covers (IBA Annex A17).
//
// The backends are packages of their own:
//
//	link/udp      UDP sockets on port 4791: recvmmsg and sendmmsg, GSO and
//	              GRO, per-QP source-port sockets, the flow socket
//	link/shm      same-host shared-memory rings, a mux in front of a UDP link
//	link/fault    seeded fault injection, a wrapper in front of any link that
//	              can seal its packets (Sealer)
//	link/memlink  an in-memory pair, for tests
//
// ReadBatch and WriteBatch block the calling goroutine; Close, from any
// goroutine, makes every blocked and later call return net.ErrClosed. The
// intended use is one reader goroutine and one or more writer goroutines
// per link:
//
//	reader goroutine ── ReadBatch ──▶ check length and ICRC ──▶ packets to the device
//	device goroutines ── WriteBatch ─▶ fill ICRC ──▶ the network
//	any goroutine ───── Close ──────▶ blocked calls return
//
// Concurrent ReadBatch calls are serialized, as are concurrent WriteBatch
// calls; a read and a write proceed in parallel.
//
// Buffers always belong to the caller: a link keeps no reference to a
// Packet or its buffer after a call returns, except what ReadLent lends
// until ReturnLent.
package link

import (
	"errors"
	"net/netip"

	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// MaxPacket is the largest RoCEv2 UDP payload (BTH through ICRC) a link
// carries: a 4096-byte payload, the longest header stack that precedes it
// (BTH, RETH and ImmDt: 32 bytes), up to 3 pad bytes and the 4-byte ICRC fit
// with room to spare; 4352 is 4096 + 256. Read buffers should have at least
// this capacity.
const MaxPacket = 4096 + 256

// MaxBatch is the largest number of packets one system call moves. ReadBatch
// returns at most MaxBatch packets; WriteBatch sends longer batches in several
// system calls.
const MaxBatch = 128

// MinPacket is the shortest packet a link accepts: a BTH and an ICRC.
const MinPacket = wire.BTHLen + wire.ICRCLen

// Errors returned by WriteBatch for a packet it will not send. The packets
// before it were sent; the count returned says how many.
var (
	ErrPacketSize  = errors.New("link: packet shorter than BTH+ICRC or longer than MaxPacket")
	ErrAddrFamily  = errors.New("link: destination address family differs from the link's")
	ErrUnknownPeer = errors.New("link: destination is not the other end of the memory pair")
)

// Packet is one RoCEv2 packet, the UDP payload from the BTH through the
// ICRC. Some fields are for writing, some for reading.
type Packet struct {
	// Buf holds BTH through ICRC.
	//
	// Write: the caller leaves the last 4 bytes as room for the ICRC,
	// which the link may fill: WriteBatch may modify Buf[len(Buf)-4:]
	// (the same-host path writes the ICRC only into the ring).
	//
	// Read: the caller supplies a buffer of capacity at least MaxPacket
	// (its length is ignored); the link reads into Buf[:cap(Buf)] and
	// reslices Buf to the packet. A datagram longer than the capacity is
	// dropped and counted (stats.LinkOversized).
	Buf []byte

	// Peer is the destination on write and the source on read. IPv4
	// addresses may be given in their IPv4-mapped IPv6 form; a link reports
	// them unmapped.
	Peer netip.AddrPort

	// Write only.

	// Payload holds the packet's payload when it is not in Buf (a
	// gather, as a NIC reads a payload straight from the registered
	// memory): the packet is then Buf[:Split], Payload, Buf[Split:] (pad
	// and the ICRC's room). The same-host path copies the parts into the
	// ring, ICRC computed in the same pass; other paths first move the
	// payload into Buf, whose capacity must hold the whole packet.
	// Payload must stay unchanged until WriteBatch returns.
	Payload []byte
	Split   int

	// SrcPort is the UDP source port to send from; 0 means the link's own
	// port. See SourcePort and FlowSourcePort for the ports rxe uses.
	SrcPort uint16

	// Read only.

	// Lent, set only by ReadLent, holds the packet instead of Buf:
	// BTH through ICRC in the link's own receive memory, which the
	// caller may read (not write) until it calls ReturnLent. nil: the
	// packet is in Buf.
	Lent []byte

	// ICRCPending, set only by ReadLent on a lent packet of a link with
	// CapDeferICRC, says the link did not check the packet's ICRC: the
	// borrower must, before it acts on the packet (wire.Packet.DeferICRC
	// with ICRCSeed, the CRC of the IP, UDP and BT headers).
	ICRCPending bool
	ICRCSeed    uint32

	// CE is set when the packet arrived marked ECN Congestion
	// Experienced: IP ECN bits 11 (IPv4 TOS, IPv6 traffic class), or a
	// fault stage marked it.
	CE bool
}

// Stats are a snapshot of a link's counters, indexed by the counters of
// internal/stats: the link counts those whose Source is stats.ByLink, and
// the rest are zero. Bytes count UDP payload bytes (BTH through ICRC).
type Stats = stats.Snapshot

// Link is a batched packet interface to the network.
type Link interface {
	// ReadBatch blocks until at least one packet has arrived, then fills
	// up to len(pkts) of them (at most MaxBatch) and returns how many.
	// Packets with a wrong ICRC and packets too short to hold a BTH and
	// an ICRC are counted in Stats and dropped, never returned. After
	// Close it returns net.ErrClosed. With len(pkts) == 0, or after
	// Interrupt, it returns (0, nil).
	//
	// On return pkts[:n] hold the packets. To pack the good packets to the
	// front, ReadBatch may exchange the Buf slices of entries of pkts
	// (never their backing arrays: pkts still holds exactly the buffers
	// the caller put there).
	ReadBatch(pkts []Packet) (int, error)

	// PollBatch is ReadBatch without waiting, for a goroutine that
	// busy-polls: it returns (0, nil) at once when no packet has arrived,
	// or when another goroutine is in ReadBatch or PollBatch (a packet
	// that arrives meanwhile goes to that one). After Close it returns
	// net.ErrClosed, or (0, nil) while a ReadBatch is still returning.
	PollBatch(pkts []Packet) (int, error)

	// ReadLent is ReadBatch, or without wait PollBatch, except that a
	// link with CapLend may lend packets (Packet.Lent) rather than copy
	// them into Buf. When it returns packets, the link stays locked for
	// reading, and what it lent valid, until ReturnLent: every other
	// read waits (or, polling, finds nothing) meanwhile.
	ReadLent(pkts []Packet, wait bool) (int, error)

	// ReturnLent ends the loan of the last ReadLent that returned
	// packets.
	ReturnLent()

	// Interrupt makes a ReadBatch that is waiting return (0, nil) at
	// once, or if none is waiting, the next one. A goroutine that starts
	// busy-polling calls it so that the reader, which holds the socket
	// while it waits, lets go of it.
	Interrupt()

	// WriteBatch fills the ICRC of each packet and sends the packets in
	// order. It returns how many were sent; if that is fewer than
	// len(pkts), the error says why pkts[n] was not. It blocks while the
	// network (or the peer's queue) has no room, and returns
	// net.ErrClosed after Close.
	WriteBatch(pkts []Packet) (int, error)

	// Segments reports whether packets to peer go out in runs of one
	// size as single datagrams (CapSegment); false on other links.
	Segments(peer netip.AddrPort) bool

	// ConnectPort gets the socket that packets from source port sport
	// to peer leave from ready ahead of the first one, from modify_qp,
	// so that the data path does not pay for it (CapConnectPort; a
	// socket, connect(2) and, for IPv4, the probes that learn its ID
	// counter). Without it, or on other links, the first packet does
	// what is needed.
	ConnectPort(sport uint16, peer netip.AddrPort)

	// LocalAddr returns the address and port the link sends from and
	// receives on.
	LocalAddr() netip.AddrPort

	// Caps returns what the link can do beyond moving packets.
	Caps() Caps

	// Stats returns a snapshot of the link's counters.
	Stats() Stats

	// Close releases the link and unblocks ReadBatch and WriteBatch. It
	// may be called more than once; later calls do nothing and return nil.
	Close() error
}

// Caps are what a link can do beyond moving packets, as it declares them
// (Link.Caps): the device asks the link, not the link's type.
type Caps uint32

const (
	// CapLend: ReadLent may lend packets in the link's own receive
	// memory (Packet.Lent) instead of copying them into the caller's
	// buffers (UDP with UDP_GRO: the packets stay in the super-packets
	// the kernel wrote; the same-host rings). A caller that processes
	// packets at once saves a copy of every byte received, and reads the
	// payload while it is still in cache.
	CapLend Caps = 1 << iota
	// CapDeferICRC: lent packets may come with their ICRC unchecked
	// (Packet.ICRCPending): the borrower checks it in the same pass that
	// places the payload (wire.Packet.CopyPayload) and reads the packet
	// once instead of twice. Only the same-host path defers, and only
	// when asked to (shm.Config.DeferICRC): shared memory is not a wire,
	// nothing damages a packet on its way, and only the peer process can
	// write a wrong one, which could as well write a right one. So a
	// borrower that places the payload of a packet whose ICRC then turns
	// out wrong (and drops it) has written only where the packet's
	// headers were allowed to write. Packets that come through a socket
	// are always checked by the link.
	CapDeferICRC
	// CapSegment: Segments may report true: the link sends a run of
	// packets of one size to one peer as a single datagram (UDP with
	// GSO, UDP_SEGMENT). On such a link each datagram, not each byte, is
	// what costs, so the transport keeps the packets of an RC RDMA WRITE
	// one size for it (transport.Path.SplitWrites).
	CapSegment
	// CapConnectPort: ConnectPort gets a per-QP source port's socket
	// ready and connected to its peer (UDP: the kernel then keeps the
	// route), ahead of the first packet, so that the data path does not
	// pay for it.
	CapConnectPort
	// CapCheapWrite: a write costs no system call now (the same-host
	// path has a channel open to a peer). Unlike the others, it may
	// change from one call of Caps to the next.
	CapCheapWrite
)

// ErrWoken ends a waiting read of a link whose owner asked to be woken
// for other work (udp.Link.SetWake: the same-host rings' doorbells).
var ErrWoken = errors.New("link: woken for other work")

// Sealed is a packet whose ICRC is filled for the source it leaves from
// (Sealer.Seal), to be sent as it is.
type Sealed struct {
	Buf      []byte // BTH through ICRC
	Dst, Src netip.AddrPort
	CE       bool // send it marked ECN Congestion Experienced
}

// Sealer is a link that a wrapper which changes packets after their ICRC
// is filled (link/fault) can stand in front of: it seals each packet as it
// would send it, then sends what the wrapper lets through as it is.
type Sealer interface {
	Link

	// Seal checks p as WriteBatch would, moves a gathered payload into
	// Buf, fills the ICRC for the source address and port p leaves from
	// and returns that source.
	Seal(p *Packet) (src netip.AddrPort, err error)

	// WriteSealed sends pkts in order, each as one datagram with its
	// bytes unchanged, and returns how many went.
	WriteSealed(pkts []Sealed) (int, error)
}
