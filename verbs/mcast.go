package verbs

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/goroce/goroce/internal/device"
)

// UD multicast (IBA 10.5, ibv_attach_mcast).
//
// On RoCEv2 a multicast GID is an IP multicast address (IPv4-mapped
// ::ffff:224.0.0.0/100, or IPv6 ff00::/8), and a multicast datagram is a UD
// packet to that address with destination QPN 0xFFFFFF. Every QP attached
// to the group on every host gets a copy. The device joins a group when its
// first QP attaches and leaves it when its last QP detaches; the engine
// receives the group's packets (internal/device: groups.go). Datagrams to a
// group are sent from the device's ordinary socket; the kernel routes them
// out of the interface that holds the source address and loops them back
// to the members on this host (IP_MULTICAST_LOOP, on by default), loopback
// included, so three processes on 127.0.0.1, 127.0.0.2 and 127.0.0.3 form
// a group without any setup.

// AttachMcast attaches a UD QP to the multicast group gid
// (ibv_attach_mcast). lid is ignored: RoCE has no LIDs.
func (qp *QP) AttachMcast(gid GID, lid uint16) error {
	_ = lid
	d := qp.dev
	group, err := qp.checkMcast(gid, "attach_mcast")
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	g := d.groups[group]
	if g == nil {
		if len(d.groups) >= maxMcastGroups {
			return &QPError{qp.qpn, "attach_mcast", fmt.Errorf("more than %d multicast groups (max_mcast_grp)", maxMcastGroups)}
		}
		if d.cfg.Link != nil {
			return &QPError{qp.qpn, "attach_mcast", errors.New("multicast needs the device's UDP socket, not Config.Link")}
		}
		m, err := d.eng.JoinGroup(group)
		if err != nil {
			return &QPError{qp.qpn, "attach_mcast", err}
		}
		g = &mcGroup{m: m}
		d.groups[group] = g
	}
	for _, x := range g.qps {
		if x == qp {
			return nil // attaching twice is harmless, as in rxe
		}
	}
	if len(g.qps) >= maxMcastQPs {
		return &QPError{qp.qpn, "attach_mcast", fmt.Errorf("group %v has %d QPs attached (max_mcast_qp_attach)", group, maxMcastQPs)}
	}
	g.qps = append(g.qps, qp)
	d.publishGroupsLocked()
	return nil
}

// DetachMcast detaches the QP from the multicast group gid
// (ibv_detach_mcast).
func (qp *QP) DetachMcast(gid GID, lid uint16) error {
	_ = lid
	d := qp.dev
	group, err := qp.checkMcast(gid, "detach_mcast")
	if err != nil {
		return err
	}
	d.mu.Lock()
	g := d.groups[group]
	i := -1
	if g != nil {
		i = slices.Index(g.qps, qp)
	}
	if i < 0 {
		d.mu.Unlock()
		return &QPError{qp.qpn, "detach_mcast", fmt.Errorf("not attached to %v", group)}
	}
	g.qps = slices.Delete(g.qps, i, i+1)
	var empty []*mcGroup
	if len(g.qps) == 0 {
		delete(d.groups, group)
		empty = append(empty, g)
	}
	d.publishGroupsLocked()
	d.mu.Unlock()
	d.leaveGroups(empty)
	return nil
}

// checkMcast checks an attach or detach: a UD QP (IBA 10.5: only UD QPs
// join multicast groups) and a multicast GID of the device's family.
func (qp *QP) checkMcast(gid GID, op string) (netip.Addr, error) {
	if qp.init.Type != QPTypeUD {
		return netip.Addr{}, &QPError{qp.qpn, op, fmt.Errorf("a %v QP cannot join multicast groups (UD only)", qp.init.Type)}
	}
	a := gid.Addr()
	if !a.IsMulticast() || a.Is4() != qp.dev.cfg.Addr.Is4() {
		return netip.Addr{}, &QPError{qp.qpn, op, fmt.Errorf("GID %v is not a multicast address of the device's family", gid)}
	}
	return a, nil
}

// detachAllLocked removes qp from every group (the QP is being destroyed)
// and returns the groups left empty, to be left without the lock.
func (d *Device) detachAllLocked(qp *QP) []*mcGroup {
	var empty []*mcGroup
	for a, g := range d.groups {
		if i := slices.Index(g.qps, qp); i >= 0 {
			g.qps = slices.Delete(g.qps, i, i+1)
		}
		if len(g.qps) == 0 {
			delete(d.groups, a)
			empty = append(empty, g)
		}
	}
	d.publishGroupsLocked()
	return empty
}

// mcGroup is a group some of the device's QPs are attached to.
type mcGroup struct {
	m   *device.Group
	qps []*QP
}

// leaveGroups makes the device leave groups no QP is attached to.
func (d *Device) leaveGroups(groups []*mcGroup) {
	for _, g := range groups {
		g.m.Leave()
	}
}

// publishGroupsLocked gives the engine a fresh copy of the attached QPs.
func (d *Device) publishGroupsLocked() {
	m := make(map[netip.Addr][]*device.QP, len(d.groups))
	for a, g := range d.groups {
		for _, qp := range g.qps {
			m[a] = append(m[a], qp.e)
		}
	}
	d.eng.SetGroups(m)
}
