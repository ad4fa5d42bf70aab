package udp

import (
	"net/netip"

	"github.com/goroce/goroce/internal/stats"

	"golang.org/x/sys/unix"
)

// The flow socket: a second receiving socket for one connection.
//
// Every datagram for the link arrives at its port (4791), and the kernel
// finds the socket that takes it when it arrives. For a socket bound to
// the port alone it looks the socket up in its tables and, off loopback,
// first routes the datagram in (ip_route_input: the FIB, the source
// check). For a socket connected to the datagram's source it does both at
// once, early, from the socket's own cache (early demux, as for an
// established TCP connection). Across a veth pair that saves part of the
// sender's sendmmsg, which delivers the datagram into the other namespace
// (docs/design/tuning.md#flow-socket); over loopback the route comes with
// the datagram and the gain is small.
//
// So when a QP connects (ConnectPort, from modify_qp to RTR), the link
// opens a socket bound to its own address and port, with SO_REUSEPORT,
// and connected to the peer's address and the connection's source port:
// rxe and goroce send a connection's packets both ways from the port its
// flow label gives (srcport.go), which both ends compute from the product
// of the two QPNs, the same number (TestSourcePortGolden checks the rule
// on every packet of the golden rxe captures, both ways; rdma_cm's ends
// share the ConnectRequest's flow label). A peer that sends from another port
// reaches the link's bound socket as before; the flow socket then stays
// empty. The main socket takes SO_REUSEPORT after its bind, so that the
// bind itself stays exclusive: another link's bind to the same address
// and port fails as before, having no SO_REUSEPORT when it binds, while
// the flow socket, which asks for it, may share the port. The kernel gives
// a datagram to the connected socket that matches its source and to the
// bound one otherwise (a reuseport group never picks a connected member
// for other sources).
//
// A link has at most one flow socket, the first connection's: every
// socket is one more place to look, and each look is a system call. The
// reads take turns (flowTurns) so that a busy poller looks on every poll
// at the socket that brings the datagrams, the flow socket in its
// connection's ping-pong, the bound one in another's, and at the other
// on one poll in flowMainEvery. A reader that waits has both sockets in
// the link's epoll set, and its wait tries both.

// flowMainEvery is how often a read looks at the socket that did not bring
// the last datagrams, while the other did or is busy: one read in
// flowMainEvery. A datagram there waits that many reads at most, and the
// socket is then busy and looked at on every read
// (docs/design/tuning.md#flow-socket).
const flowMainEvery = 64

// openFlow opens the flow socket for the connection from sport to peer,
// if the link has none yet; u.wr is held (ConnectPort).
func (u *Link) openFlow(sport uint16, peer netip.AddrPort) {
	if u.wr.flowTried || !u.flowOK {
		return
	}
	u.wr.flowTried = true
	u.set.ops.RLock() // keeps the descriptors open (sockSet.close)
	defer u.set.ops.RUnlock()
	if u.set.closed.Load() {
		return
	}
	o := u.opts
	o.reusePort = true
	s, _, err := openSocket(u.laddr, u.scope, o, u.set)
	if err != nil {
		return // the bound socket takes the connection's datagrams
	}
	// In the epoll set from the start: a reader waiting now on the bound
	// socket alone wakes for the flow socket's first datagram (woken) and
	// takes the socket over (adoptFlow), its watch included.
	if unix.Connect(s.fd, sockaddr(netip.AddrPortFrom(peer.Addr(), sport), u.scope)) != nil || s.watch() != nil {
		unix.Close(s.fd)
		return
	}
	u.flowFD.Store(int32(s.fd) + 1)
	u.stats.Inc(stats.FlowSockets)
	u.flowNew.Store(s)
}

// adoptFlow returns the flow socket, taking over a new one; u.rd is
// held. A socket opened while a busy poller has the reads leaves the epoll
// set at once, as the bound socket has.
func (u *Link) adoptFlow() *sockFD {
	if u.rd.flow != nil || u.flowNew.Load() == nil {
		return u.rd.flow
	}
	f := u.flowNew.Swap(nil)
	u.rd.flow, u.sock.with = f, f
	u.rd.turns.lastFlow = true // the flow socket has every poll until the bound one brings datagrams
	if !u.sock.watched {
		f.unwatch()
	}
	return f
}

// woken is the reader's wake check (sockSet.wake): a wait on the bound
// socket alone ends for a new flow socket as it does for what the owner
// watches (SetWake), and the reader takes it over; a wait with the flow
// socket tries it itself (sockFD.waitStep).
func (u *Link) woken() bool {
	w := u.wake != nil && u.wake()
	return w || u.flowNew.Load() != nil
}

// recvFrom reads up to cnt datagrams into u.rd.m from the flow socket or
// the bound one; u.rd is held. A poll looks where flowTurns says; a
// read that waits waits on both. u.rd.fromFlow tells which socket the
// datagrams came from.
func (u *Link) recvFrom(cnt int, wait bool) (int, error) {
	for {
		f := u.adoptFlow()
		var k int
		var err error
		switch {
		case f == nil:
			u.rd.fromFlow = false
			k, err = u.rd.m.readFrom(u.sock, cnt, wait)
		case !wait:
			looks, n := u.rd.turns.plan()
			for _, flow := range looks[:n] {
				if k, err = u.look(f, flow, cnt, false); k > 0 || err != nil {
					break
				}
			}
		default:
			// The wait is on the bound socket, which has the flow socket
			// watched with it and tries both (sockFD.with).
			k, err = u.look(f, false, cnt, true)
		}
		if err == errWoken && u.wake == nil {
			continue // a new flow socket: take it over, and wait on both
		}
		return k, err
	}
}

// look reads from the flow socket f (flow) or the bound one.
func (u *Link) look(f *sockFD, flow bool, cnt int, wait bool) (int, error) {
	s := u.sock
	if flow {
		s = f
	}
	k, err := u.rd.m.readFrom(s, cnt, wait)
	flow = flow || u.sock.gotWith
	if err == nil {
		u.rd.turns.looked(flow, k)
	}
	u.rd.fromFlow = flow
	return k, err
}

// flowTurns decides where a busy poller's read looks when the link has a
// flow socket. A socket whose last look found datagrams is busy. When
// one of the two is busy, or when neither is and one brought the last
// datagrams, that one is looked at on every poll and the other on one
// poll in flowMainEvery; when both are busy, both, the one that did not
// bring the last datagrams first (a poll stops at the first look that
// finds datagrams). A ping-pong's poller thus makes one system call per
// poll, as without a flow socket, whether its connection is the flow
// socket's or another's, and a stream on either socket leaves the other
// a look in every flowMainEvery.
type flowTurns struct {
	busy     [2]bool // the last look at the bound socket [0] and at the flow socket [1] found datagrams
	lastFlow bool    // the last look that found datagrams was at the flow socket (adoptFlow starts it true)
	since    int     // polls since the other socket was last looked at
}

// plan returns the sockets the next poll looks at, in order (true: the
// flow socket), and how many.
func (t *flowTurns) plan() (looks [2]bool, n int) {
	if t.busy[0] && t.busy[1] {
		return [2]bool{!t.lastFlow, t.lastFlow}, 2
	}
	busy := t.lastFlow // the socket looked at on every poll
	if t.busy[0] != t.busy[1] {
		busy = t.busy[1]
	}
	t.since++
	if t.since < flowMainEvery {
		return [2]bool{busy}, 1
	}
	t.since = 0
	return [2]bool{!busy, busy}, 2 // the idle one first: the busy one would always answer
}

// looked notes that a look at the flow socket (flow) or the bound one
// found k datagrams.
func (t *flowTurns) looked(flow bool, k int) {
	i := 0
	if flow {
		i = 1
	}
	t.busy[i] = k > 0
	if k > 0 {
		t.lastFlow = flow
	}
}
