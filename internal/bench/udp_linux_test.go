//go:build linux

package bench

import (
	"net/netip"
	"testing"
)

// TestUDPCeiling moves 16 MiB over the UDP ceiling's sockets: all of it
// arrives (the window keeps the receiver's buffer from overflowing) at a
// rate that is a rate.
func TestUDPCeiling(t *testing.T) {
	cfg := Config{Server: netip.MustParseAddr("127.0.5.20"), Client: netip.MustParseAddr("127.0.5.21")}
	mibps, lost, err := udpCeiling(cfg, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if lost != 0 {
		t.Errorf("%.1f%% of the bytes dropped, want none", 100*lost)
	}
	if !(mibps > 0) || mibps > 1e6 {
		t.Errorf("%v MiB/s", mibps)
	}
}
