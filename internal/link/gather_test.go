//go:build linux

package link

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/internal/wire"
)

// gathered returns pkts with their payloads moved out of Buf
// (Packet.Payload, Split), as a QP that sends from the MR emits them.
func gathered(pkts []Packet) []Packet {
	out := make([]Packet, len(pkts))
	for i, p := range pkts {
		n := len(p.Buf) - wire.BTHLen - wire.ICRCLen
		payload := bytes.Clone(p.Buf[wire.BTHLen : wire.BTHLen+n])
		b := make([]byte, 0, MaxPacket)
		b = append(append(b, p.Buf[:wire.BTHLen]...), p.Buf[wire.BTHLen+n:]...)
		out[i] = Packet{Buf: b, Split: wire.BTHLen, Payload: payload, Peer: p.Peer}
	}
	return out
}

// TestGatherWrite: a gathered packet arrives as the packet it stands for,
// ICRC included, over every path: UDP (with and without GSO, and a run of
// small packets that a UDP link with GSO puts together in its stage), the
// same-host ring, the memory pair, and UDP through a fault stage; the
// link counts the whole packets' bytes.
func TestGatherWrite(t *testing.T) {
	mem := func(t *testing.T) (Link, Link) {
		a, b := NewMemPair(mustParse("10.0.0.1:4791"), mustParse("10.0.0.2:4791"))
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}
	udp := func(cfg UDPConfig) func(t *testing.T) (Link, Link) {
		return func(t *testing.T) (Link, Link) { return udpPairConfig(t, "127.0.0.1", "127.0.0.2", cfg) }
	}
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (Link, Link)
	}{
		{"udp", udp(UDPConfig{})},
		{"udp-nogso", udp(UDPConfig{NoGSO: true})},
		{"samehost", udp(UDPConfig{SameHost: true})},
		{"fault", udp(UDPConfig{Fault: FaultConfig{Seed: 1, CEMark: 1e-12}})}, // active, changes nothing
		{"mem", mem},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.open(t)
			want := batch(12, b.LocalAddr())
			for i := range 8 {
				want = append(want, Packet{Buf: buildPacket(make([]byte, MaxPacket), 0x11, uint32(100+i), 64, byte(i)), Peer: b.LocalAddr()})
			}
			sent := gathered(want)
			if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			var bytes uint64
			for _, p := range want {
				bytes += uint64(len(p.Buf))
			}
			if st := a.Stats(); st.SentPackets != uint64(len(want)) || st.SentBytes != bytes {
				t.Errorf("Stats: %d packets, %d bytes sent; want %d, %d", st.SentPackets, st.SentBytes, len(want), bytes)
			}
			var ids []uint16
			if _, ok := a.(*UDP); ok && tc.name == "udp" {
				ids = gsoIDs(want)
			} else {
				ids = make([]uint16, len(want))
			}
			checkReceivedIDs(t, readN(t, b, len(want)), want, ids, a.LocalAddr(), b.LocalAddr())
			if u, ok := a.(*UDP); ok && tc.name == "samehost" && u.Stats().SameHostSent != uint64(len(want)) {
				t.Errorf("SameHostSent %d, want %d", u.Stats().SameHostSent, len(want))
			}
		})
	}
}

// TestGatherRefused: a gathered packet too long for MaxPacket, or whose
// split is outside its headers, is refused, never sent cut (the memory
// pair too).
func TestGatherRefused(t *testing.T) {
	for _, cfg := range []UDPConfig{{}, {SameHost: true}, {Fault: FaultConfig{CEMark: 1e-12}}} {
		a, b := udpPairConfig(t, "127.0.0.1", "127.0.0.2", cfg)
		long := gathered(batch(6, b.LocalAddr()))[5]
		long.Payload = make([]byte, MaxPacket)
		split := gathered(batch(6, b.LocalAddr()))[5]
		split.Split = len(split.Buf)
		for _, p := range []Packet{long, split} {
			if n, err := a.WriteBatch([]Packet{p}); n != 0 || err != ErrPacketSize {
				t.Errorf("%+v: WriteBatch of a bad gathered packet = %d, %v; want ErrPacketSize", cfg, n, err)
			}
		}
	}
	a, b := NewMemPair(mustParse("10.0.0.1:4791"), mustParse("10.0.0.2:4791"))
	defer a.Close()
	defer b.Close()
	p := gathered(batch(6, b.LocalAddr()))[5]
	p.Split = 2
	if n, err := a.WriteBatch([]Packet{p}); n != 0 || err != ErrPacketSize {
		t.Errorf("memory pair: WriteBatch of a bad gathered packet = %d, %v; want ErrPacketSize", n, err)
	}
}
