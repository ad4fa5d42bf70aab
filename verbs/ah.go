package verbs

import (
	"errors"
	"fmt"
	"net/netip"
)

// AH is an address handle (ibv_ah; IBA 11.2.2, address handle verbs): the address vector a UD
// work request sends to. On RoCE the address vector always has a GRH
// (IsGlobal), and its DGID is the peer's IP address, unicast or a
// multicast group.
type AH struct {
	pd        *PD
	attr      AHAttr
	dest      netip.AddrPort
	destroyed bool // guarded by the device's mu
}

// CreateAH creates an address handle (ibv_create_ah). The attributes are
// checked as for a QP's address vector: IsGlobal set, a source GID index
// within the GID table, and a DGID of the device's address family.
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	d := pd.dev
	if err := d.checkAV(&attr); err != nil {
		return nil, fmt.Errorf("verbs: create AH: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if d.objs.ahs >= maxAH {
		return nil, fmt.Errorf("verbs: create AH: more than %d address handles (max_ah)", maxAH)
	}
	d.objs.ahs++
	return &AH{pd: pd, attr: attr, dest: netip.AddrPortFrom(attr.DGID.Addr(), d.cfg.Port)}, nil
}

// Attr returns the attributes the AH was created with.
func (ah *AH) Attr() AHAttr { return ah.attr }

// Dest returns the IP address and UDP port datagrams to this AH go to.
// It implements the transport's view of an AH.
func (ah *AH) Dest() netip.AddrPort { return ah.dest }

// Destroy releases the address handle (ibv_destroy_ah). Work requests
// already posted with it are not affected: they resolved it when posted.
func (ah *AH) Destroy() error {
	d := ah.pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if ah.destroyed {
		return errors.New("verbs: destroy AH: already destroyed")
	}
	ah.destroyed = true
	d.objs.ahs--
	return nil
}

// checkAV checks an address vector. On RoCE every packet carries an IP
// header, which is the GRH (IBA Annex A17, RoCEv2): is_global must be set.
func (d *Device) checkAV(a *AHAttr) error {
	bad := func(v any, rule string) error {
		return fmt.Errorf("attribute AV = %v: %s", v, rule)
	}
	if !a.IsGlobal {
		return bad("is_global=0", "RoCE needs a GRH: set IsGlobal and DGID")
	}
	if int(a.SGIDIndex) >= len(d.gids) {
		return bad(fmt.Sprintf("sgid_index=%d", a.SGIDIndex), fmt.Sprintf("the GID table has %d entries", len(d.gids)))
	}
	if a.FlowLabel > 0xfffff {
		return bad(fmt.Sprintf("flow_label=%#x", a.FlowLabel), "flow labels have 20 bits")
	}
	dst := a.DGID.Addr()
	if !dst.IsValid() || dst.Is4() != d.cfg.Addr.Is4() {
		return bad("dgid="+a.DGID.String(), "the peer must be of the device's address family ("+d.cfg.Addr.String()+")")
	}
	return nil
}
