//go:build linux

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/stats"
)

// Sealed writes (link.Sealer), for a fault stage in front of the link: a
// packet's ICRC is filled for the port it will leave from (Seal), the
// stage does what it does to the finished packet, and WriteSealed sends
// what it lets through as it is, one datagram each from an unconnected
// socket (whose IPv4 ID is the 0 the ICRC was filled for), consecutive
// packets from one source port in one sendmmsg.

// Seal implements link.Sealer.
func (u *Link) Seal(p *link.Packet) (netip.AddrPort, error) {
	p.Flatten()
	if !p.Sendable(false) {
		return netip.AddrPort{}, link.ErrPacketSize
	}
	dst := link.Plain(p.Peer)
	if dst.Addr().Is4() != u.laddr.Addr().Is4() {
		return netip.AddrPort{}, link.ErrAddrFamily
	}
	_, src, fallback, err := u.portConn(p.SrcPort)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if fallback {
		u.stats.Inc(stats.PortFallbacks)
	}
	f := link.SendFields(src, dst)
	link.PutICRC(p.Buf, &f)
	return src, nil
}

// WriteSealed implements link.Sealer.
func (u *Link) WriteSealed(out []link.Sealed) (int, error) {
	u.wr.Lock()
	defer u.wr.Unlock()
	m := u.wr.m
	is6 := u.laddr.Addr().Is6()
	sent := 0
	for sent < len(out) {
		port := out[sent].Src.Port()
		rc, _, _, err := u.portConn(port) // the socket Seal chose
		if err != nil {
			return sent, err
		}
		cnt := 0
		for sent+cnt < len(out) && cnt < link.MaxBatch && out[sent+cnt].Src.Port() == port {
			o := &out[sent+cnt]
			m.setName(cnt, o.Dst, u.scope)
			m.setBuf(cnt, o.Buf)
			m.setCE(cnt, o.CE, is6)
			cnt++
		}
		for off := 0; off < cnt; {
			k, err := m.writeTo(rc, off, cnt-off, false)
			sent, off = sent+k, off+k
			if err != nil {
				m.clearBufs(cnt)
				return sent, sealedErr(u, err)
			}
		}
		m.clearBufs(cnt)
	}
	return sent, nil
}

// sealedErr names the link in a write error other than net.ErrClosed.
func sealedErr(u *Link, err error) error {
	if errors.Is(err, net.ErrClosed) {
		return net.ErrClosed
	}
	return fmt.Errorf("link: write %v: %w", u.laddr, err)
}
