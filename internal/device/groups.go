package device

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/udp"
)

// Multicast groups (IBA 10.5; rxe_mcast.c).
//
// On RoCEv2 a multicast GID is an IP multicast address, and a multicast
// datagram is a UD packet to that address with destination QPN 0xFFFFFF.
// Every goroce device of a host receives a group's packets on a socket of
// its own, bound to (group, port) and a member of the group on the
// interface that holds the device's address (link/udp: Config.Interface):
// the kernel gives each such socket its own copy of each datagram. The
// engine opens that link when the device joins the group (its first QP
// attaches) and closes it when the device leaves (its last QP detaches),
// and a reader goroutine per group hands each packet to every attached QP.
// Datagrams to a group leave from the device's own link.

// groups are the multicast groups the device has joined.
type groups struct {
	mu   sync.Mutex
	open map[*Group]bool // guarded by mu; nil once closed

	// attachedQPs are the QPs attached to each group, for the group
	// readers, replaced whole on every change (SetGroups).
	attachedQPs atomic.Pointer[map[netip.Addr][]*QP]
}

// Group is one membership of a multicast group: its link and the reader
// that drains it.
type Group struct {
	e    *Engine
	link link.Link
	done chan struct{} // closed when the reader ends
}

// ErrNoMulticast is returned by JoinGroup on an engine whose link is not
// its own UDP socket (Config.Link).
var ErrNoMulticast = errors.New("device: multicast needs the device's UDP socket")

// JoinGroup makes the device a member of the multicast group addr: it
// opens a link for the group's packets and starts its reader.
func (e *Engine) JoinGroup(addr netip.Addr) (*Group, error) {
	if e.cfg.Link != nil {
		return nil, ErrNoMulticast
	}
	l, err := udp.Listen(udp.Config{Addr: netip.AddrPortFrom(addr, e.cfg.Addr.Port()),
		Interface: e.cfg.Addr.Addr(), NetNS: e.cfg.NetNS})
	if err != nil {
		return nil, err
	}
	g := &Group{e: e, link: l, done: make(chan struct{})}
	e.groups.mu.Lock()
	if e.groups.open == nil {
		e.groups.open = map[*Group]bool{}
	}
	e.groups.open[g] = true
	e.groups.mu.Unlock()
	go e.routineGroup(g, addr)
	return g, nil
}

// routineGroup is the reader goroutine of a group's link.
func (e *Engine) routineGroup(g *Group, addr netip.Addr) {
	defer close(g.done)
	e.readLink(g.link, addr)
}

// Leave ends the membership: it closes the group's link and waits for its
// reader.
func (g *Group) Leave() {
	gs := &g.e.groups
	gs.mu.Lock()
	delete(gs.open, g)
	gs.mu.Unlock()
	g.close()
}

// SetGroups gives the group readers the QPs attached to each group; the
// caller keeps no reference to m or its slices.
func (e *Engine) SetGroups(m map[netip.Addr][]*QP) { e.groups.attachedQPs.Store(&m) }

// attached returns the QPs attached to group addr.
func (gs *groups) attached(addr netip.Addr) []*QP {
	if m := gs.attachedQPs.Load(); m != nil {
		return (*m)[addr]
	}
	return nil
}

// closeAll leaves every group.
func (gs *groups) closeAll() {
	gs.mu.Lock()
	open := gs.open
	gs.open = nil
	gs.mu.Unlock()
	for g := range open {
		g.close()
	}
}

// close closes the group's link and waits for its reader; it may run more
// than once.
func (g *Group) close() {
	g.link.Close()
	<-g.done
}
