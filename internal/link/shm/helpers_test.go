//go:build linux

package shm

import (
	"net"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/udp"
	"github.com/goroce/goroce/internal/stats"
)

// freePort returns a UDP port on ip that was free a moment ago: tests never
// use 4791, so they run beside a real device.
func freePort(t testing.TB, ip string) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(ip), 0)))
	if err != nil {
		t.Skipf("no UDP on %s: %v", ip, err)
	}
	defer c.Close()
	return link.Plain(c.LocalAddr().(*net.UDPAddr).AddrPort())
}

// listen opens a UDP link on addr with the same-host path in front of it;
// cfg.Dir defaults to the run directory.
func listen(addr netip.AddrPort, cfg Config) (*Mux, error) {
	if cfg.Dir == "" {
		cfg.Dir = stats.Dir()
	}
	u, err := udp.Listen(udp.Config{Addr: addr, NetNS: cfg.NetNS})
	if err != nil {
		return nil, err
	}
	m, err := New(u, cfg)
	if err != nil {
		u.Close()
		return nil, err
	}
	return m, nil
}

// muxPair opens two same-host links on free ports of 127.0.0.1 and
// 127.0.0.2.
func muxPair(t testing.TB, cfg Config) (*Mux, *Mux) {
	t.Helper()
	a, err := listen(freePort(t, "127.0.0.1"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := listen(freePort(t, "127.0.0.2"), cfg)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}
