package memlink

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/stats"
)

func TestMemRoundTrip(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"IPv4", "10.0.0.1:4791", "10.0.0.2:4791"},
		{"IPv6", "[fd00::1]:4791", "[fd00::2]:4791"},
		{"IPv4-mapped", "[::ffff:10.0.0.1]:4791", "10.0.0.2:4791"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := NewPair(linktest.MustParse(tc.a), linktest.MustParse(tc.b))
			defer a.Close()
			defer b.Close()
			pkts := linktest.Batch(64, b.LocalAddr())
			pkts[5].SrcPort = link.SourcePort(0x11)
			sent := make([]link.Packet, len(pkts))
			n, err := a.WriteBatch(pkts)
			if n != len(pkts) || err != nil {
				t.Fatalf("WriteBatch = %d, %v; want %d, nil", n, err, len(pkts))
			}
			for i, p := range pkts {
				sent[i] = link.Packet{Buf: bytes.Clone(p.Buf)}
				p.Buf[len(p.Buf)/2] ^= 0xff // the link must have copied
			}
			got := linktest.ReadN(t, b, len(pkts))
			from := a.LocalAddr()
			linktest.CheckReceived(t, got[:5], sent[:5], from, b.LocalAddr())
			linktest.CheckReceived(t, got[6:], sent[6:], from, b.LocalAddr())
			qpFrom := netip.AddrPortFrom(from.Addr(), link.SourcePort(0x11))
			linktest.CheckReceived(t, got[5:6], sent[5:6], qpFrom, b.LocalAddr())

			var want link.Stats
			want[stats.LinkSentPkts], want[stats.LinkRcvdPkts] = 64, 64
			for _, p := range sent {
				want[stats.LinkSentBytes] += uint64(len(p.Buf))
			}
			want[stats.LinkRcvdBytes] = want[stats.LinkSentBytes]
			if sa, sb := a.Stats(), b.Stats(); sa[stats.LinkSentPkts] != want[stats.LinkSentPkts] || sa[stats.LinkSentBytes] != want[stats.LinkSentBytes] ||
				sb[stats.LinkRcvdPkts] != want[stats.LinkRcvdPkts] || sb[stats.LinkRcvdBytes] != want[stats.LinkRcvdBytes] {
				t.Errorf("stats: sender %+v, receiver %+v; want %+v", sa, sb, want)
			}
		})
	}
}

// TestMemDropsBadPackets corrupts packets in flight: a flipped bit anywhere
// (header, payload, ICRC) and a truncated packet must be counted and
// dropped, and the good packets around them delivered in order.
func TestMemDropsBadPackets(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"IPv4", "10.0.0.1:4791", "10.0.0.2:4791"},
		{"IPv6", "[fd00::1]:4791", "[fd00::2]:4791"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := NewPair(linktest.MustParse(tc.a), linktest.MustParse(tc.b))
			defer a.Close()
			defer b.Close()
			k := 0
			a.inFlight = func(p []byte) []byte {
				defer func() { k++ }()
				switch k % 4 {
				case 1:
					p[k%len(p)] ^= 1 << (k % 8) // anywhere, including the ICRC
				case 2:
					return p[:link.MinPacket-1]
				}
				return p
			}
			pkts := linktest.Batch(64, b.LocalAddr())
			if n, err := a.WriteBatch(pkts); n != 64 || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			var want []link.Packet
			for i, p := range pkts {
				if i%4 == 0 || i%4 == 3 {
					want = append(want, p)
				}
			}
			got := linktest.ReadN(t, b, len(want))
			linktest.CheckReceived(t, got, want, a.LocalAddr(), b.LocalAddr())
			if s := b.Stats(); s[stats.ICRCErrors] != 16 || s[stats.LinkMalformed] != 16 || s[stats.LinkRcvdPkts] != 32 {
				t.Errorf("receiver stats %+v, want 16 ICRC errors, 16 malformed, 32 received", s)
			}
		})
	}
}

func TestMemOversized(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := NewPair(linktest.MustParse("10.0.0.1:1"), linktest.MustParse("10.0.0.2:2"))
	defer a.Close()
	defer b.Close()
	pkts := []link.Packet{
		{Buf: linktest.BuildPacket(make([]byte, link.MaxPacket), 1, 1, 4096, 0), Peer: b.LocalAddr()}, // does not fit in 100 bytes
		{Buf: linktest.BuildPacket(make([]byte, link.MaxPacket), 1, 2, 10, 0), Peer: b.LocalAddr()},
	}
	if _, err := a.WriteBatch(pkts); err != nil {
		t.Fatal(err)
	}
	small := []link.Packet{{Buf: make([]byte, 0, 100)}, {Buf: make([]byte, 0, 100)}}
	if n, err := b.ReadBatch(small); n != 1 || err != nil {
		t.Fatalf("ReadBatch = %d, %v; want 1 packet", n, err)
	}
	if s := b.Stats(); s[stats.LinkOversized] != 1 {
		t.Errorf("Oversized = %d, want 1", s[stats.LinkOversized])
	}
}

func TestMemRefuses(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := NewPair(linktest.MustParse("10.0.0.1:4791"), linktest.MustParse("10.0.0.2:4791"))
	defer a.Close()
	defer b.Close()
	good := linktest.Batch(1, b.LocalAddr())[0]
	for _, tc := range []struct {
		name string
		p    link.Packet
		want error
	}{
		{"short", link.Packet{Buf: make([]byte, link.MinPacket-1), Peer: b.LocalAddr()}, link.ErrPacketSize},
		{"long", link.Packet{Buf: make([]byte, link.MaxPacket+1), Peer: b.LocalAddr()}, link.ErrPacketSize},
		{"wrong peer", link.Packet{Buf: good.Buf, Peer: linktest.MustParse("10.0.0.3:4791")}, link.ErrUnknownPeer},
		{"wrong port", link.Packet{Buf: good.Buf, Peer: linktest.MustParse("10.0.0.2:1")}, link.ErrUnknownPeer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := a.WriteBatch([]link.Packet{good, tc.p, good})
			if n != 1 || !errors.Is(err, tc.want) {
				t.Errorf("WriteBatch = %d, %v; want 1, %v", n, err, tc.want)
			}
		})
	}
	if s := a.Stats(); s[stats.LinkSentPkts] != 4 || s[stats.LinkSendErrors] != 4 {
		t.Errorf("stats %+v, want 4 sent, 4 send errors", s)
	}
}

func TestMemNewPairPanicsOnMixedFamilies(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewPair(IPv4, IPv6) did not panic")
		}
	}()
	NewPair(linktest.MustParse("10.0.0.1:1"), linktest.MustParse("[fd00::1]:1"))
}

// TestMemClose checks that Close unblocks a blocked ReadBatch and a blocked
// WriteBatch on either end, and that nothing blocks afterwards.
func TestMemClose(t *testing.T) {
	t.Run("read", func(t *testing.T) {
		linktest.CheckNoLeaks(t)
		a, b := NewPair(linktest.MustParse("10.0.0.1:1"), linktest.MustParse("10.0.0.2:2"))
		defer a.Close()
		errc := make(chan error, 1)
		go func() { _, err := b.ReadBatch(linktest.ReadBufs(4)); errc <- err }()
		time.Sleep(20 * time.Millisecond) // let it block (it must not matter)
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		linktest.WantClosed(t, "blocked ReadBatch", linktest.WaitErr(t, errc))
		_, err := b.ReadBatch(linktest.ReadBufs(1))
		linktest.WantClosed(t, "ReadBatch after Close", err)
		_, err = b.WriteBatch(linktest.Batch(1, a.LocalAddr()))
		linktest.WantClosed(t, "WriteBatch after Close", err)
		if err := b.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
	// A full queue blocks the writer; the writer's Close returns
	// ErrClosed, the reader's Close discards the rest.
	for _, closer := range []string{"writer", "reader"} {
		t.Run("full queue, close "+closer, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := NewPair(linktest.MustParse("10.0.0.1:1"), linktest.MustParse("10.0.0.2:2"))
			defer a.Close()
			defer b.Close()
			pkts := linktest.Batch(queueLen+10, b.LocalAddr())
			type result struct {
				n   int
				err error
			}
			res := make(chan result, 1)
			go func() { n, err := a.WriteBatch(pkts); res <- result{n, err} }()
			// Wait until the writer has filled the queue, however
			// slowly the machine runs it.
			q := a.tx
			linktest.WaitFor(t, "the writer to fill the queue", func() bool { return len(q.full) == queueLen })
			time.Sleep(10 * time.Millisecond) // and is blocked on the next slot
			select {
			case r := <-res:
				t.Fatalf("WriteBatch into a full queue returned %d, %v", r.n, r.err)
			default:
			}
			if closer == "writer" {
				a.Close()
			} else {
				b.Close()
			}
			var r result
			select {
			case r = <-res:
			case <-time.After(5 * time.Second):
				t.Fatal("Close did not unblock WriteBatch")
			}
			if closer == "writer" {
				if r.n != queueLen {
					t.Errorf("WriteBatch sent %d, want %d", r.n, queueLen)
				}
				linktest.WantClosed(t, "blocked WriteBatch", r.err)
			} else if r.n != len(pkts) || r.err != nil {
				t.Errorf("WriteBatch to a closed peer = %d, %v; want %d, nil", r.n, r.err, len(pkts))
			}
		})
	}
}

// TestMemAllocs checks the steady state: a batch of 64 written and read
// allocates nothing.
func TestMemAllocs(t *testing.T) {
	a, b := NewPair(linktest.MustParse("10.0.0.1:1"), linktest.MustParse("10.0.0.2:2"))
	defer a.Close()
	defer b.Close()
	linktest.CheckRoundTripAllocs(t, a, b, linktest.Batch(64, b.LocalAddr()), b.ReadBatch)
}
