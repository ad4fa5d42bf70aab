//go:build linux

package udp

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
)

// checkReceived is linktest.CheckReceived for packets sent by a UDP link:
// over IPv4 ID 0, or the ID a GSO link gives it (gsoIDs).
func checkReceived(t testing.TB, got, sent []link.Packet, from, to netip.AddrPort) {
	t.Helper()
	linktest.CheckReceivedIDs(t, got, sent, gsoIDs(sent), from, to)
}

// gsoIDs is SegmentIDs.
func gsoIDs(pkts []link.Packet) []uint16 { return SegmentIDs(pkts) }

// udpPair opens two UDP links on free ports of the two IPs.
func udpPair(t testing.TB, ipA, ipB string) (*Link, *Link) {
	t.Helper()
	return udpPairConfig(t, ipA, ipB, Config{})
}

// udpPairConfig is udpPair with cfg for both links (cfg.Addr is set here).
func udpPairConfig(t testing.TB, ipA, ipB string, cfg Config) (*Link, *Link) {
	t.Helper()
	cfg.Addr = linktest.FreePort(t, ipA)
	a, err := Listen(cfg)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = linktest.FreePort(t, ipB)
	b, err := Listen(cfg)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// udpFamilies are the loopback addresses of each family the tests use.
var udpFamilies = []struct{ name, a, b string }{
	{"IPv4", "127.0.0.1", "127.0.0.2"},
	{"IPv6", "::1", "::1"},
}
