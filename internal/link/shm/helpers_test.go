//go:build linux

package shm

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/link/udp"
	"github.com/goroce/goroce/internal/stats"
)

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
	a, err := listen(linktest.FreePort(t, "127.0.0.1"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := listen(linktest.FreePort(t, "127.0.0.2"), cfg)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}
