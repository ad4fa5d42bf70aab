package link

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"
)

func TestMemRoundTrip(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"IPv4", "10.0.0.1:4791", "10.0.0.2:4791"},
		{"IPv6", "[fd00::1]:4791", "[fd00::2]:4791"},
		{"IPv4-mapped", "[::ffff:10.0.0.1]:4791", "10.0.0.2:4791"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoLeaks(t)
			a, b := NewMemPair(mustParse(tc.a), mustParse(tc.b))
			defer a.Close()
			defer b.Close()
			pkts := batch(64, b.LocalAddr())
			pkts[5].SrcPort = SourcePort(0x11)
			sent := make([]Packet, len(pkts))
			n, err := a.WriteBatch(pkts)
			if n != len(pkts) || err != nil {
				t.Fatalf("WriteBatch = %d, %v; want %d, nil", n, err, len(pkts))
			}
			for i, p := range pkts {
				sent[i] = Packet{Buf: bytes.Clone(p.Buf)}
				p.Buf[len(p.Buf)/2] ^= 0xff // the link must have copied
			}
			got := readN(t, b, len(pkts))
			from := a.LocalAddr()
			checkReceived(t, got[:5], sent[:5], from, b.LocalAddr())
			checkReceived(t, got[6:], sent[6:], from, b.LocalAddr())
			qpFrom := netip.AddrPortFrom(from.Addr(), SourcePort(0x11))
			checkReceived(t, got[5:6], sent[5:6], qpFrom, b.LocalAddr())

			want := Stats{SentPackets: 64, RcvdPackets: 64}
			for _, p := range sent {
				want.SentBytes += uint64(len(p.Buf))
			}
			want.RcvdBytes = want.SentBytes
			if sa, sb := a.Stats(), b.Stats(); sa.SentPackets != want.SentPackets || sa.SentBytes != want.SentBytes ||
				sb.RcvdPackets != want.RcvdPackets || sb.RcvdBytes != want.RcvdBytes {
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
			checkNoLeaks(t)
			a, b := NewMemPair(mustParse(tc.a), mustParse(tc.b))
			defer a.Close()
			defer b.Close()
			k := 0
			a.(*memLink).inFlight = func(p []byte) []byte {
				defer func() { k++ }()
				switch k % 4 {
				case 1:
					p[k%len(p)] ^= 1 << (k % 8) // anywhere, including the ICRC
				case 2:
					return p[:minPacket-1]
				}
				return p
			}
			pkts := batch(64, b.LocalAddr())
			if n, err := a.WriteBatch(pkts); n != 64 || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			var want []Packet
			for i, p := range pkts {
				if i%4 == 0 || i%4 == 3 {
					want = append(want, p)
				}
			}
			got := readN(t, b, len(want))
			checkReceived(t, got, want, a.LocalAddr(), b.LocalAddr())
			if s := b.Stats(); s.ICRCErrors != 16 || s.Malformed != 16 || s.RcvdPackets != 32 {
				t.Errorf("receiver stats %+v, want 16 ICRC errors, 16 malformed, 32 received", s)
			}
		})
	}
}

func TestMemOversized(t *testing.T) {
	checkNoLeaks(t)
	a, b := NewMemPair(mustParse("10.0.0.1:1"), mustParse("10.0.0.2:2"))
	defer a.Close()
	defer b.Close()
	pkts := []Packet{
		{Buf: buildPacket(make([]byte, MaxPacket), 1, 1, 4096, 0), Peer: b.LocalAddr()}, // does not fit in 100 bytes
		{Buf: buildPacket(make([]byte, MaxPacket), 1, 2, 10, 0), Peer: b.LocalAddr()},
	}
	if _, err := a.WriteBatch(pkts); err != nil {
		t.Fatal(err)
	}
	small := []Packet{{Buf: make([]byte, 0, 100)}, {Buf: make([]byte, 0, 100)}}
	if n, err := b.ReadBatch(small); n != 1 || err != nil {
		t.Fatalf("ReadBatch = %d, %v; want 1 packet", n, err)
	}
	if s := b.Stats(); s.Oversized != 1 {
		t.Errorf("Oversized = %d, want 1", s.Oversized)
	}
}

func TestMemRefuses(t *testing.T) {
	checkNoLeaks(t)
	a, b := NewMemPair(mustParse("10.0.0.1:4791"), mustParse("10.0.0.2:4791"))
	defer a.Close()
	defer b.Close()
	good := batch(1, b.LocalAddr())[0]
	for _, tc := range []struct {
		name string
		p    Packet
		want error
	}{
		{"short", Packet{Buf: make([]byte, minPacket-1), Peer: b.LocalAddr()}, ErrPacketSize},
		{"long", Packet{Buf: make([]byte, MaxPacket+1), Peer: b.LocalAddr()}, ErrPacketSize},
		{"wrong peer", Packet{Buf: good.Buf, Peer: mustParse("10.0.0.3:4791")}, ErrUnknownPeer},
		{"wrong port", Packet{Buf: good.Buf, Peer: mustParse("10.0.0.2:1")}, ErrUnknownPeer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := a.WriteBatch([]Packet{good, tc.p, good})
			if n != 1 || !errors.Is(err, tc.want) {
				t.Errorf("WriteBatch = %d, %v; want 1, %v", n, err, tc.want)
			}
		})
	}
	if s := a.Stats(); s.SentPackets != 4 || s.SendErrors != 4 {
		t.Errorf("stats %+v, want 4 sent, 4 send errors", s)
	}
}

func TestMemNewPairPanicsOnMixedFamilies(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewMemPair(IPv4, IPv6) did not panic")
		}
	}()
	NewMemPair(mustParse("10.0.0.1:1"), mustParse("[fd00::1]:1"))
}

// TestMemClose checks that Close unblocks a blocked ReadBatch and a blocked
// WriteBatch on either end, and that nothing blocks afterwards.
func TestMemClose(t *testing.T) {
	t.Run("read", func(t *testing.T) {
		checkNoLeaks(t)
		a, b := NewMemPair(mustParse("10.0.0.1:1"), mustParse("10.0.0.2:2"))
		defer a.Close()
		errc := make(chan error, 1)
		go func() { _, err := b.ReadBatch(readBufs(4)); errc <- err }()
		time.Sleep(20 * time.Millisecond) // let it block (it must not matter)
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		wantClosed(t, "blocked ReadBatch", waitErr(t, errc))
		_, err := b.ReadBatch(readBufs(1))
		wantClosed(t, "ReadBatch after Close", err)
		_, err = b.WriteBatch(batch(1, a.LocalAddr()))
		wantClosed(t, "WriteBatch after Close", err)
		if err := b.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
	// A full queue blocks the writer; the writer's Close returns
	// ErrClosed, the reader's Close discards the rest.
	for _, closer := range []string{"writer", "reader"} {
		t.Run("full queue, close "+closer, func(t *testing.T) {
			checkNoLeaks(t)
			a, b := NewMemPair(mustParse("10.0.0.1:1"), mustParse("10.0.0.2:2"))
			defer a.Close()
			defer b.Close()
			pkts := batch(memQueueLen+10, b.LocalAddr())
			type result struct {
				n   int
				err error
			}
			res := make(chan result, 1)
			go func() { n, err := a.WriteBatch(pkts); res <- result{n, err} }()
			// Wait until the writer has filled the queue, however
			// slowly the machine runs it.
			q := a.(*memLink).tx
			waitFor(t, "the writer to fill the queue", func() bool { return len(q.full) == memQueueLen })
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
				if r.n != memQueueLen {
					t.Errorf("WriteBatch sent %d, want %d", r.n, memQueueLen)
				}
				wantClosed(t, "blocked WriteBatch", r.err)
			} else if r.n != len(pkts) || r.err != nil {
				t.Errorf("WriteBatch to a closed peer = %d, %v; want %d, nil", r.n, r.err, len(pkts))
			}
		})
	}
}

func waitErr(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock the call")
		return nil
	}
}

// TestMemAllocs checks the steady state: a batch of 64 written and read
// allocates nothing.
func TestMemAllocs(t *testing.T) {
	a, b := NewMemPair(mustParse("10.0.0.1:1"), mustParse("10.0.0.2:2"))
	defer a.Close()
	defer b.Close()
	checkRoundTripAllocs(t, a, b, batch(64, b.LocalAddr()), b.ReadBatch)
}
