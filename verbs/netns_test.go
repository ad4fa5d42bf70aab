package verbs

import (
	"bytes"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/link/memlink"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/stats"
)

// TestNetNS opens two devices in two network namespaces joined by a veth
// pair with MTU 9000 (Config.NetNS), from this one process, and moves
// WRITEs, READs and SENDs between them on several QPs. Every QP sends from
// a source port of its own, from a socket its link opens in the device's
// namespace when the QP first sends: none may fall back to the link's own
// port, which a socket made in the process's namespace would have to,
// since the address is not there. The active MTU (4096) comes from the
// veth in the namespace; outside it the address is unknown and would give
// 1024.
func TestNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	v, err := netns.NewVeth("goroce-vt", netip.MustParsePrefix("198.18.13.1/24"), netip.MustParsePrefix("198.18.13.2/24"), 9000)
	if err != nil {
		if strings.Contains(err.Error(), "not found") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	})
	da, db := openPair(t, Config{Addr: v.A, NetNS: v.NSA.Name()}, Config{Addr: v.B, NetNS: v.NSB.Name()})
	for _, d := range []*Device{da, db} {
		if got := d.QueryPort().ActiveMTU; got != MTU4096 {
			t.Errorf("%s: active MTU %v, want 4096 (the veth's 9000, seen in its namespace)", d.Name(), got)
		}
	}
	const size = 1 << 20
	for q := range 4 {
		a, b := newEndpoint(t, da, 2*size), newEndpoint(t, db, 2*size)
		connect(t, a, b, MTU4096)
		fill(a.buf[:size], uint64(q))
		_, err := a.qp.PostSend([]SendWR{
			{WRID: 1, Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
			{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(size, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		})
		must(t, err)
		if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess || wc.WRID != 2 {
			t.Fatalf("QP %d: READ completion %+v", q, wc)
		}
		if !bytes.Equal(a.buf[size:], a.buf[:size]) {
			t.Fatalf("QP %d: what was written and read back differs", q)
		}
		_, err = a.qp.PostRecv([]RecvWR{{WRID: 3, SGL: []SGE{a.mr.SGE(0, 64)}}})
		must(t, err)
		_, err = b.qp.PostSend([]SendWR{{WRID: 4, Opcode: WRSend, Flags: SendSignaled | SendInline, SGL: []SGE{b.mr.SGE(0, 64)}}})
		must(t, err)
		if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess || wc.Opcode != WCRecv || wc.ByteLen != 64 {
			t.Fatalf("QP %d: receive completion %+v", q, wc)
		}
		if wc := wait(t, b.cq, 1)[0]; wc.Status != WCSuccess {
			t.Fatalf("QP %d: send completion %+v", q, wc)
		}
	}
	for _, d := range []*Device{da, db} {
		st := d.eng.Link().Stats()
		if st[stats.PortFallbacks] != 0 {
			t.Errorf("%s: %d packets left from the link's own port: a per-QP socket could not be made in the namespace", d.Name(), st[stats.PortFallbacks])
		}
		// The probe socket that learns their ID counters works in
		// the namespace too.
		if st[stats.ConnectedPorts] != 4 || st[stats.UnconnectedPorts] != 0 {
			t.Errorf("%s: ConnectedPorts, UnconnectedPorts = %d, %d; want 4, 0", d.Name(), st[stats.ConnectedPorts], st[stats.UnconnectedPorts])
		}
	}
}

// TestNetNSRejects names Config.NetNS when it cannot be used.
func TestNetNSRejects(t *testing.T) {
	addr := netip.MustParseAddr("127.0.1.250")
	mem, _ := memlink.NewPair(netip.AddrPortFrom(addr, 4791), netip.MustParseAddrPort("127.0.1.251:4791"))
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Addr: addr, NetNS: "/proc/self/status"}, "not a network namespace"},
		{Config{Addr: addr, NetNS: "/nonexistent/ns"}, "no such file"},
		{Config{Addr: addr, NetNS: "/proc/self/ns/net", Link: mem}, "Config.Link"},
	} {
		d, err := Open(c.cfg)
		if err == nil {
			d.Close()
			t.Errorf("Open(NetNS %q) succeeded", c.cfg.NetNS)
			continue
		}
		if !strings.Contains(err.Error(), "Config.NetNS") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(NetNS %q): %v, want Config.NetNS and %q", c.cfg.NetNS, err, c.want)
		}
	}
}
