//go:build linux

package udp

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
)

func TestGSORun(t *testing.T) {
	a, b := linktest.MustParse("10.0.0.1:4791"), linktest.MustParse("10.0.0.2:4791")
	type pk struct {
		size int
		peer netip.AddrPort
		port uint16
	}
	// Every other packet that can be is gathered, its payload out of Buf:
	// a run is by packet size, not by the length of Buf.
	mk := func(ps []pk) []link.Packet {
		out := make([]link.Packet, len(ps))
		for i, p := range ps {
			out[i] = link.Packet{Buf: make([]byte, p.size), Peer: p.peer, SrcPort: p.port}
			if i%2 == 1 && p.size >= 40 {
				out[i].Buf, out[i].Split, out[i].Payload = make([]byte, 20), 12, make([]byte, p.size-20)
			}
		}
		return out
	}
	same := func(n, size int) []pk {
		ps := make([]pk, n)
		for i := range ps {
			ps[i] = pk{size, a, 0}
		}
		return ps
	}
	for _, tc := range []struct {
		name     string
		pkts     []pk
		maxSegs  int
		maxBytes int
		want     int
	}{
		{"empty", nil, 64, 65507, 0},
		{"one", same(1, 100), 64, 65507, 1},
		{"equal sizes", same(10, 100), 64, 65507, 10},
		{"shorter last ends the run", []pk{{100, a, 0}, {100, a, 0}, {60, a, 0}, {60, a, 0}}, 64, 65507, 3},
		{"longer packet starts a new run", []pk{{100, a, 0}, {100, a, 0}, {104, a, 0}}, 64, 65507, 2},
		{"shorter second", []pk{{100, a, 0}, {60, a, 0}, {100, a, 0}}, 64, 65507, 2},
		{"destination changes", []pk{{100, a, 0}, {100, a, 0}, {100, b, 0}}, 64, 65507, 2},
		{"source port changes", []pk{{100, a, 0}, {100, a, 7}}, 64, 65507, 1},
		{"segment limit", same(100, 16), 64, 65507, 64},
		{"segment limit, custom", same(10, 16), 4, 65507, 4},
		{"byte limit", same(40, 4128), 64, 65507, 15},
		{"byte limit exact", same(3, 100), 64, 300, 3},
		{"byte limit, short last fits", []pk{{100, a, 0}, {100, a, 0}, {50, a, 0}}, 64, 250, 3},
		{"byte limit, short last does not fit", []pk{{100, a, 0}, {100, a, 0}, {60, a, 0}}, 64, 250, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gsoRun(mk(tc.pkts), tc.maxSegs, tc.maxBytes); got != tc.want {
				t.Errorf("gsoRun = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestMaxGSOBytes(t *testing.T) {
	// The IPv4 packet (20 + 8 + payload) and the IPv6 payload (8 + payload)
	// may not exceed 65535 bytes.
	if got := maxGSOBytes(false); got != 65507 {
		t.Errorf("IPv4: %d, want 65507", got)
	}
	if got := maxGSOBytes(true); got != 65527 {
		t.Errorf("IPv6: %d, want 65527", got)
	}
}
