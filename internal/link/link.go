// Package link moves RoCEv2 packets between a device and the network in
// batches: UDP sockets on port 4791, or an in-memory pair for tests. A link
// generates the ICRC of every packet it sends and checks it on every packet it
// receives, because only it knows the IP and UDP header fields the ICRC covers
// (IBA Annex A17).
//
// A link starts no goroutines, except one to release held packets when its
// FaultConfig delays or reorders them, and a UDP link's listener for
// same-host peers (UDPConfig.SameHost); Close stops them. ReadBatch and
// WriteBatch block the calling goroutine (a UDP link's socket is watched
// by the Go netpoller only while a ReadBatch waits, so that a packet nobody
// waits for wakes no thread: see sockfd_linux.go); Close, from any
// goroutine, makes every blocked and later call return net.ErrClosed. The
// intended use is one reader goroutine and one or more writer goroutines
// per link:
//
//	reader goroutine ── ReadBatch ──▶ (UDP: split GRO super-packets) ──▶ check length and ICRC ──▶ packets to the device
//	device goroutines ── WriteBatch ─▶ fill ICRC ──▶ fault stage, if any ──▶ sendmmsg, grouped by source port
//	                                   (UDP without faults: runs of equal packets as GSO super-packets)
//	any goroutine ───── Close ──────▶ closes the sockets; blocked calls return
//
// Concurrent ReadBatch calls are serialized, as are concurrent WriteBatch
// calls; a read and a write proceed in parallel.
//
// Buffers always belong to the caller: a link keeps no reference to a
// Packet or its buffer after a call returns (the memory pair copies each
// packet into a slot of its own).
package link

import (
	"errors"
	"net/netip"
	"sync/atomic"

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

// minPacket is the shortest packet a link accepts: a BTH and an ICRC.
const minPacket = wire.BTHLen + wire.ICRCLen

// Errors returned by WriteBatch for a packet it will not send. The packets
// before it were sent; the count returned says how many.
var (
	ErrPacketSize  = errors.New("link: packet shorter than BTH+ICRC or longer than MaxPacket")
	ErrAddrFamily  = errors.New("link: destination address family differs from the link's")
	ErrUnknownPeer = errors.New("link: destination is not the other end of the memory pair")
)

// Packet is one RoCEv2 packet, the UDP payload from the BTH through the ICRC.
type Packet struct {
	// Buf holds BTH through ICRC.
	//
	// On write the caller leaves the last 4 bytes as room for the ICRC,
	// which the link may fill: WriteBatch may modify Buf[len(Buf)-4:]
	// (the same-host path writes the ICRC only into the ring).
	//
	// On read the caller supplies a buffer of capacity at least MaxPacket
	// (its length is ignored); the link reads into Buf[:cap(Buf)] and
	// reslices Buf to the packet. A datagram longer than the capacity is
	// dropped and counted in Stats.Oversized.
	Buf []byte

	// Payload, on write, holds the packet's payload when it is not in
	// Buf (a gather, as a NIC reads a payload straight from the
	// registered memory): the packet is then Buf[:Split], Payload,
	// Buf[Split:] (pad and the ICRC's room). The same-host path copies
	// the parts into the ring, ICRC computed in the same pass; other
	// paths first move the payload into Buf, whose capacity must hold
	// the whole packet. Payload must stay unchanged until WriteBatch
	// returns. Ignored on read.
	Payload []byte
	Split   int

	// Peer is the destination on write and the source on read. IPv4
	// addresses may be given in their IPv4-mapped IPv6 form; a link reports
	// them unmapped.
	Peer netip.AddrPort

	// SrcPort is the UDP source port to send from; 0 means the link's own
	// port. Ignored on read. See SourcePort and FlowSourcePort for the ports
	// rxe uses.
	SrcPort uint16

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

	// CE is set on read when the packet arrived marked ECN Congestion
	// Experienced: IP ECN bits 11 (IPv4 TOS, IPv6 traffic class), or a
	// memory pair's fault stage marked it (FaultConfig.CEMark). Ignored
	// on write.
	CE bool
}

// Stats are a link's counters, a snapshot taken by Link.Stats. Bytes count
// UDP payload bytes (BTH through ICRC).
type Stats struct {
	SentPackets uint64 // packets handed to the network
	SentBytes   uint64
	RcvdPackets uint64 // packets returned by ReadBatch
	RcvdBytes   uint64

	ICRCErrors uint64 // dropped on receive: wrong ICRC (IPv4: no IP ID makes it right)
	Malformed  uint64 // dropped on receive: shorter than BTH+ICRC, or an unexpected source address family
	Oversized  uint64 // dropped on receive: longer than the read buffer's capacity

	// SocketDrops counts datagrams the kernel dropped on the link's
	// sockets before the link could read them, almost always because a
	// receive buffer was full (UDP links, SO_RXQ_OVFL; as of the last
	// datagram read from each socket, so drops show once traffic resumes).
	SocketDrops uint64
	SendErrors  uint64 // WriteBatch calls that stopped on an error

	// PortFallbacks counts packets sent from the link's own port instead
	// of their SrcPort, because no socket could be opened for that port
	// (see UDP).
	PortFallbacks uint64

	// ConnectedPorts counts per-port sockets connected to their peer
	// (UDP: the kernel keeps their route); UnconnectedPorts those that
	// could not be, or whose IPv4 ID counter could not be learned, and
	// send every datagram with its address.
	ConnectedPorts, UnconnectedPorts uint64

	// FlowSockets counts the sockets a UDP link opened for one
	// connection's datagrams (0 or 1; see UDP), FlowDatagrams the
	// datagrams read from them.
	FlowSockets, FlowDatagrams uint64

	// LoneSends counts datagrams sent by sendto, the one datagram of a
	// write on a connected port socket, instead of sendmmsg (UDP);
	// SegmentOptions the times a port socket's UDP_SEGMENT option was
	// set for them.
	LoneSends, SegmentOptions uint64

	// IDRecoveries counts IPv4 packets received whose IP ID was not the
	// one the link expected, and was recovered from the ICRC (some 0.2 µs
	// each; see idGuess).
	IDRecoveries uint64

	// SameHostSent counts packets sent through the same-host path
	// (UDPConfig.SameHost), included in SentPackets; SameHostDrops those
	// of them dropped because the peer's ring was full.
	SameHostSent, SameHostDrops uint64

	// Fault counts what the link's fault stage did to the packets it
	// sent; zero without one. SentPackets and SentBytes count what
	// WriteBatch accepted, before the stage.
	Fault FaultStats
}

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
	// when asked to (UDPConfig.DeferICRC): shared memory is not a wire,
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

// counters are the atomic counters behind Stats. Hot paths add once per
// batch, not once per packet.
type counters struct {
	sentPackets, sentBytes atomic.Uint64
	rcvdPackets, rcvdBytes atomic.Uint64
	icrcErrors, malformed  atomic.Uint64
	oversized, sendErrors  atomic.Uint64
	portFallbacks          atomic.Uint64
	connectedPorts         atomic.Uint64
	unconnectedPorts       atomic.Uint64
	idRecoveries           atomic.Uint64
	sameHostSent           atomic.Uint64
	sameHostDrops          atomic.Uint64
	socketDrops            atomic.Uint64 // the highest drop count a datagram of the bound socket reported
	flowDrops              atomic.Uint64 // the same for the flow socket
	flowSockets            atomic.Uint64
	flowDatagrams          atomic.Uint64
	loneSends              atomic.Uint64
	segOptions             atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		SentPackets:      c.sentPackets.Load(),
		SentBytes:        c.sentBytes.Load(),
		RcvdPackets:      c.rcvdPackets.Load(),
		RcvdBytes:        c.rcvdBytes.Load(),
		ICRCErrors:       c.icrcErrors.Load(),
		Malformed:        c.malformed.Load(),
		Oversized:        c.oversized.Load(),
		SendErrors:       c.sendErrors.Load(),
		PortFallbacks:    c.portFallbacks.Load(),
		ConnectedPorts:   c.connectedPorts.Load(),
		UnconnectedPorts: c.unconnectedPorts.Load(),
		IDRecoveries:     c.idRecoveries.Load(),
		SocketDrops:      c.socketDrops.Load() + c.flowDrops.Load(),
		FlowSockets:      c.flowSockets.Load(),
		FlowDatagrams:    c.flowDatagrams.Load(),
		LoneSends:        c.loneSends.Load(),
		SegmentOptions:   c.segOptions.Load(),
		SameHostSent:     c.sameHostSent.Load(),
		SameHostDrops:    c.sameHostDrops.Load(),
	}
}

// rxCount tallies one ReadBatch call before it is added to the counters.
type rxCount struct {
	packets, bytes, icrc, malformed, oversized uint64
	recovered                                  uint64 // IPv4 IDs recovered from the ICRC
	drops                                      uint32 // the highest SO_RXQ_OVFL count seen
	flow                                       bool   // the datagrams came from the flow socket
	datagrams                                  uint64 // datagrams taken (counted for the flow socket)
}

// noteDrops records the socket drop count a datagram carried.
func (r *rxCount) noteDrops(n uint32) { r.drops = max(r.drops, n) }

func (c *counters) addRx(r *rxCount) {
	if r.packets != 0 {
		c.rcvdPackets.Add(r.packets)
		c.rcvdBytes.Add(r.bytes)
	}
	if r.icrc != 0 {
		c.icrcErrors.Add(r.icrc)
	}
	if r.malformed != 0 {
		c.malformed.Add(r.malformed)
	}
	if r.oversized != 0 {
		c.oversized.Add(r.oversized)
	}
	if r.recovered != 0 {
		c.idRecoveries.Add(r.recovered)
	}
	// The kernel's count is cumulative (and 32 bits: it wraps after 2^32
	// drops, which the link does not track), one per socket.
	drops := &c.socketDrops
	if r.flow {
		drops = &c.flowDrops
		if r.datagrams != 0 {
			c.flowDatagrams.Add(r.datagrams)
		}
	}
	for d := uint64(r.drops); d != 0; {
		old := drops.Load()
		if d <= old || drops.CompareAndSwap(old, d) {
			break
		}
	}
}

func (c *counters) addTx(packets, bytes uint64, err error) {
	if packets != 0 {
		c.sentPackets.Add(packets)
		c.sentBytes.Add(bytes)
	}
	if err != nil {
		c.sendErrors.Add(1)
	}
}

// sendFields returns the header fields the ICRC of a packet sent from src to
// dst covers, with IPv4 ID 0: what an unconnected UDP socket with DF set
// sends (the kernel's ip_select_ident_segs gives a counter only to
// connected sockets; measured in REFERENCE.md §9 and on every run of
// TestWireHeaders), and goroce's links always set DF. A connected port
// socket's sends set the ID its counter gives (idprobe_linux.go).
func sendFields(src, dst netip.AddrPort) wire.IPFields {
	return wire.IPFields{
		Src: src.Addr(), Dst: dst.Addr(),
		SrcPort: src.Port(), DstPort: dst.Port(),
		ID: 0, FlagsFrag: wire.DF,
	}
}

// size is the length of the packet p holds, gathered or not.
func (p *Packet) size() int { return len(p.Buf) + len(p.Payload) }

// sendable reports whether p is a packet a link sends: minPacket to
// MaxPacket bytes, and a gathered payload placed after a whole BTH and
// before the ICRC's room. A path that cannot gather (gather false) takes
// only packets with their payload in Buf, which flatten leaves every
// packet it can put together.
func (p *Packet) sendable(gather bool) bool {
	n := p.size()
	return n >= minPacket && n <= MaxPacket &&
		(p.Payload == nil || gather && p.Split >= wire.BTHLen && p.Split <= len(p.Buf)-wire.ICRCLen)
}

// flatten moves a gathered payload (Packet.Payload) into Buf. A packet
// that is not sendable, or whose Buf cannot hold it, is left as it is:
// the link's checks refuse it (ErrPacketSize).
func flatten(p *Packet) {
	if p.Payload == nil || !p.sendable(true) || p.size() > cap(p.Buf) {
		return
	}
	b := p.makeRoom()
	copy(b[p.Split:], p.Payload)
	p.Buf, p.Payload, p.Split = b, nil, 0
}

// makeRoom returns Buf grown to the whole packet, its tail (pad and ICRC
// room) moved after the room for the gathered payload.
func (p *Packet) makeRoom() []byte {
	b := p.Buf[:p.size()]
	copy(b[p.Split+len(p.Payload):], p.Buf[p.Split:]) // the ranges overlap: copy moves
	return b
}

// flattenICRC is flatten and putICRC in one pass over a gathered payload,
// which is copied into Buf while it is checksummed (wire.IPFields.ICRCGather):
// the payload is read once, from the MR, instead of copied and then read
// again. p must be sendable with a gathered payload, and Buf must have the
// capacity for the whole packet.
func flattenICRC(p *Packet, f *wire.IPFields) {
	if p.Payload == nil {
		putICRC(p.Buf, f)
		return
	}
	b := p.makeRoom()
	wire.PutICRC(b, f.ICRCGather(b[:len(b)-wire.ICRCLen], p.Split, p.Payload))
	p.Buf, p.Payload, p.Split = b, nil, 0
}

// flattenInto puts p together in dst, which must hold p.size() bytes, with
// its ICRC, reading a gathered payload once (wire.IPFields.ICRCGather), and
// returns the packet's length. p is left as it was.
func flattenInto(dst []byte, p *Packet, f *wire.IPFields) int {
	n := p.size()
	b := dst[:n]
	body := b[:n-wire.ICRCLen]
	if p.Payload == nil {
		copy(b, p.Buf)
		wire.PutICRC(b, f.ICRC(body))
		return n
	}
	copy(b, p.Buf[:p.Split])
	copy(b[p.Split+len(p.Payload):], p.Buf[p.Split:])
	wire.PutICRC(b, f.ICRCGather(body, p.Split, p.Payload))
	return n
}

// putICRC fills the ICRC of pkt (BTH through ICRC, len >= minPacket).
func putICRC(pkt []byte, f *wire.IPFields) {
	body := pkt[:len(pkt)-wire.ICRCLen]
	wire.PutICRC(pkt, f.ICRC(body))
}

// checkICRC reports whether pkt (BTH through ICRC, len >= minPacket) carries
// a correct ICRC for a datagram from src to dst.
//
// IPv6: the socket knows every field the ICRC covers, so the check is the
// full 32-bit CRC.
//
// IPv4: the socket does not see the IP identification, which rxe fills
// from a counter, so the packet is accepted if some ID makes its ICRC right
// (wire.RecoverIPv4ID; a random corruption then survives with probability
// 2^-16, see docs/WIRE.md). The flags are assumed to be DF with fragment
// offset 0: rxe and goroce both set DF, and a fragment never reaches a UDP
// socket unreassembled.
//
// ID 0, what an unconnected sender puts in a single datagram, is tried
// first: that costs one CRC, and recovery (about 0.2 µs more) runs only
// when it is wrong. The UDP link's reads, which meet connected senders and
// rxe too, predict the ID per peer (checkICRCID, idGuess).
//
// c, if not nil, is the caller's wire.HeaderCache.
func checkICRC(src, dst netip.AddrPort, pkt []byte, c *wire.HeaderCache) bool {
	_, ok := checkICRCID(src, dst, pkt, 0, c)
	return ok
}

// checkICRCID is checkICRC for a packet that most likely carries IPv4 ID
// want (the peer's next ID, or the one after the previous segment's in a
// super-packet): that ID costs one CRC, any other a recovery on top. It returns the ID that makes the
// ICRC right (IPv4; 0 for IPv6).
func checkICRCID(src, dst netip.AddrPort, pkt []byte, want uint16, c *wire.HeaderCache) (id uint16, ok bool) {
	f := sendFields(src, dst)
	f.Cache = c
	is4 := f.Src.Is4()
	if is4 {
		f.ID = want
	}
	body := pkt[:len(pkt)-wire.ICRCLen]
	delta := f.ICRC(body) ^ wire.StoredICRC(pkt)
	if delta == 0 {
		return f.ID, true
	}
	if !is4 {
		return 0, false
	}
	// The CRC is linear in the ID: delta is the contribution of the
	// ID's difference from want, no second CRC over the packet needed.
	e, ok := wire.IPv4IDFromDelta(len(body), delta)
	return want ^ e, ok
}

// plain returns a with an IPv4-mapped address unmapped and any zone removed,
// the form the ICRC and comparisons use.
func plain(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap().WithZone(""), a.Port())
}
