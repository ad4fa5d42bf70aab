//go:build linux

package udp

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/stats"
	"golang.org/x/sys/unix"
)

// TestLoneSends follows a connected port socket through writes of one
// datagram, which leave by sendto (Stats[stats.LoneSends]), and the UDP_SEGMENT
// option they set for super-packets (Stats[stats.SegmentOptions]): every packet
// must arrive whole, in order and with the ICRC its IPv4 ID gives it,
// whether it went by sendto or by sendmmsg beside a socket option that
// would have segmented it.
func TestLoneSends(t *testing.T) {
	needGSO(t)
	for _, tc := range []struct{ name, a, b string }{{"IPv4", probeA, probeB}, {"IPv6", "::1", "::1"}} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := udpPair(t, tc.a, tc.b)
			sport := link.SourcePort(0x45)
			src := netip.AddrPortFrom(a.LocalAddr().Addr(), sport)
			var ps *portSocket
			// send writes one batch of packets with these payload sizes
			// and checks what b reads.
			send := func(sizes ...int) {
				t.Helper()
				pkts := make([]link.Packet, len(sizes))
				for i, n := range sizes {
					pkts[i] = link.Packet{Buf: linktest.BuildPacket(make([]byte, link.MaxPacket), 0x11, uint32(i), n, byte(i)), Peer: b.LocalAddr(), SrcPort: sport}
				}
				if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
					t.Fatalf("WriteBatch%v = %d, %v", sizes, k, err)
				}
				linktest.CheckReceivedIDs(t, linktest.ReadN(t, b, len(pkts)), pkts, wantIDs(a, pkts), src, b.LocalAddr())
				if ps == nil {
					ps = a.ports.m[sport]
				}
			}
			// want checks the counts since the start and the socket's
			// option, which the link's record must match.
			want := func(step string, lone, opts uint64, seg int) {
				t.Helper()
				s := a.Stats()
				if s[stats.LoneSends] != lone || s[stats.SegmentOptions] != opts {
					t.Errorf("%s: LoneSends %d, SegmentOptions %d; want %d, %d", step, s[stats.LoneSends], s[stats.SegmentOptions], lone, opts)
				}
				got, err := unix.GetsockoptInt(ps.sock.fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
				if err != nil {
					t.Fatal(err)
				}
				if got != seg || int(ps.seg) != seg {
					t.Errorf("%s: UDP_SEGMENT %d, the link's record %d; want %d", step, got, ps.seg, seg)
				}
			}
			const small = 12 + 8 + 4 // a packet with 8 bytes of payload
			send(100)
			want("a plain datagram", 1, 0, 0)
			send(8, 0)
			want("a first super-packet", 1, 0, 0) // sendmmsg, its size noted
			send(8, 0)
			want("a second of its size", 2, 1, small)
			send(8, 8, 8)
			want("three segments of that size", 3, 1, small)
			send(0)
			want("a plain datagram within the size", 4, 1, small)
			send(1000)
			want("a plain datagram beyond the size", 4, 1, small) // whole, by sendmmsg
			send(1000, 8, 0, 64)
			want("several messages", 4, 1, small)
			send(64, 0)
			want("a super-packet of another size", 4, 1, small) // its own control message

			lone, opts := uint64(4), uint64(1)
			if src.Addr().Is4() {
				// An ID counter learned again clears the option first:
				// the probes are plain datagrams.
				a.wr.Lock()
				ps.ids.known = false
				a.wr.Unlock()
				send(8, 0)
				want("after learning the counter again", lone, opts, 0)
				send(8, 0)
				lone, opts = lone+1, opts+1
				want("the size again", lone, opts, small)
			}

			// A link that stops sending super-packets (the kernel refused
			// one) clears the option before its plain datagrams.
			a.wr.Lock()
			a.wr.gso = false
			a.wr.Unlock()
			send(1000, 8)
			want("plain datagrams", lone, opts, 0)
			send(100)
			want("a lone plain datagram", lone+1, opts, 0)
		})
	}
}

// TestLoneSendsRandom sends random batches from a connected port socket:
// lone plain datagrams and super-packets of a few sizes, runs of them and
// mixes, with the ID counter now and then learned again, so that the
// socket's UDP_SEGMENT option is set, kept and overridden in every order;
// every packet must arrive whole, in order, with its ICRC.
func TestLoneSendsRandom(t *testing.T) {
	needGSO(t)
	linktest.CheckNoLeaks(t)
	a, b := udpPair(t, probeA, probeB)
	sport := link.SourcePort(0x46)
	src := netip.AddrPortFrom(a.LocalAddr().Addr(), sport)
	rng := rand.New(rand.NewPCG(30, 1))
	sizes := []int{0, 2, 8, 64, 500, 1000, 4096}
	for round := range 300 {
		var batch []int
		for range 1 + rng.IntN(3) { // runs of one size
			n := sizes[rng.IntN(len(sizes))]
			for range 1 + rng.IntN(4) {
				batch = append(batch, n)
			}
			if rng.IntN(2) == 0 { // a shorter last segment, as an ACK after a WRITE
				batch = append(batch, 0)
			}
		}
		if rng.IntN(3) == 0 { // a lone packet, plain or of two segments
			batch = batch[:1+rng.IntN(min(2, len(batch)))]
		}
		pkts := make([]link.Packet, len(batch))
		for i, n := range batch {
			pkts[i] = link.Packet{Buf: linktest.BuildPacket(make([]byte, link.MaxPacket), 0x11, uint32(i), n, byte(round+i)), Peer: b.LocalAddr(), SrcPort: sport}
		}
		if rng.IntN(40) == 0 && round > 0 {
			a.wr.Lock()
			a.ports.m[sport].ids.known = false
			a.wr.Unlock()
		}
		if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
			t.Fatalf("round %d: WriteBatch%v = %d, %v", round, batch, k, err)
		}
		linktest.CheckReceivedIDs(t, linktest.ReadN(t, b, len(pkts)), pkts, wantIDs(a, pkts), src, b.LocalAddr())
		if t.Failed() {
			t.Fatalf("round %d: batch %v", round, batch)
		}
	}
	if s := a.Stats(); s[stats.LoneSends] == 0 || s[stats.SegmentOptions] == 0 || s[stats.ICRCErrors] != 0 || b.Stats()[stats.ICRCErrors] != 0 {
		t.Errorf("LoneSends %d, SegmentOptions %d, ICRC errors %d and %d; want some, some, none", s[stats.LoneSends], s[stats.SegmentOptions], s[stats.ICRCErrors], b.Stats()[stats.ICRCErrors])
	}
}
