package link

import (
	"net/netip"
	"testing"
	"time"
)

// pollLinks returns a pair of each kind: UDP with and without GRO, and
// memory.
func pollLinks(t *testing.T) map[string][2]Link {
	a, b := udpPair(t, "127.0.0.1", "127.0.0.2")
	c, d := udpPairConfig(t, "127.0.0.1", "127.0.0.2", UDPConfig{NoGSO: true})
	m, n := NewMemPair(netip.MustParseAddrPort("198.18.0.1:4791"), netip.MustParseAddrPort("198.18.0.2:4791"))
	t.Cleanup(func() { m.Close(); n.Close() })
	return map[string][2]Link{"udp": {a, b}, "udp/NoGSO": {c, d}, "mem": {m, n}}
}

// TestPollBatch: PollBatch returns 0 at once on an empty link, and the
// packets, checked, once they are there.
func TestPollBatch(t *testing.T) {
	for name, l := range pollLinks(t) {
		t.Run(name, func(t *testing.T) {
			a, b := l[0], l[1]
			bufs := readBufs(MaxBatch)
			start := time.Now()
			if n, err := b.PollBatch(bufs); n != 0 || err != nil {
				t.Fatalf("PollBatch on an empty link = %d, %v", n, err)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("PollBatch on an empty link took %v", d)
			}
			sent := batch(20, b.LocalAddr())
			if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			checkReceived(t, pollN(t, b, bufs, len(sent)), sent, a.LocalAddr(), b.LocalAddr())
			b.Close()
			if _, err := b.PollBatch(bufs); err == nil {
				t.Error("PollBatch after Close: no error")
			}
		})
	}
}

// TestInterrupt: Interrupt makes a waiting ReadBatch return (0, nil), and
// an Interrupt with nobody waiting makes the next ReadBatch return at
// once; after that ReadBatch waits for packets again.
func TestInterrupt(t *testing.T) {
	for name, l := range pollLinks(t) {
		t.Run(name, func(t *testing.T) {
			a, b := l[0], l[1]
			bufs := readBufs(MaxBatch)
			type result struct {
				n   int
				err error
			}
			read := func() chan result {
				ch := make(chan result, 1)
				go func() {
					n, err := b.ReadBatch(bufs)
					ch <- result{n, err}
				}()
				return ch
			}
			waitFor := func(ch chan result, what string) result {
				t.Helper()
				select {
				case r := <-ch:
					return r
				case <-time.After(5 * time.Second):
					t.Fatalf("%s: ReadBatch did not return", what)
					return result{}
				}
			}
			ch := read()
			time.Sleep(20 * time.Millisecond) // let it wait
			b.Interrupt()
			if r := waitFor(ch, "interrupt while waiting"); r.n != 0 || r.err != nil {
				t.Fatalf("interrupted ReadBatch = %d, %v", r.n, r.err)
			}
			b.Interrupt()
			if r := waitFor(read(), "interrupt before waiting"); r.n != 0 || r.err != nil {
				t.Fatalf("ReadBatch after Interrupt = %d, %v", r.n, r.err)
			}
			// Back to normal: waits, then returns the packet.
			ch = read()
			select {
			case r := <-ch:
				t.Fatalf("ReadBatch with nothing sent returned %d, %v", r.n, r.err)
			case <-time.After(20 * time.Millisecond):
			}
			sent := batch(1, b.LocalAddr())
			if n, err := a.WriteBatch(sent); n != 1 || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			if r := waitFor(ch, "a packet"); r.n != 1 || r.err != nil {
				t.Fatalf("ReadBatch = %d, %v", r.n, r.err)
			}
		})
	}
}

// TestReadLent: a UDP link with GRO lends the packets of a super-packet
// without copying them into the caller's buffers, each checked; while they
// are lent, other reads find nothing; after ReturnLent the link reads on.
func TestReadLent(t *testing.T) {
	a, b := udpPair(t, "127.0.0.1", "127.0.0.2")
	if b.gro == nil {
		t.Skip("no UDP_GRO")
	}
	if b.Caps()&CapLend == 0 {
		t.Fatal("a GRO link does not declare CapLend")
	}
	var ln Link = b
	sent := make([]Packet, 16) // one run of equal sizes: a super-packet
	for i := range sent {
		sent[i] = Packet{Buf: buildPacket(make([]byte, MaxPacket), 0x11, uint32(i), 1024, byte(i)), Peer: b.LocalAddr()}
	}
	if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	bufs := readBufs(4) // fewer than were sent: the rest waits in the link
	var got []Packet
	for len(got) < len(sent) {
		n, err := ln.ReadLent(bufs, true)
		if err != nil || n == 0 {
			t.Fatalf("ReadLent = %d, %v", n, err)
		}
		for _, p := range bufs[:n] {
			if p.Lent == nil {
				t.Fatal("a GRO link copied instead of lending")
			}
			if len(p.Buf) != 0 {
				t.Fatalf("ReadLent wrote %d bytes into the caller's buffer", len(p.Buf))
			}
			got = append(got, Packet{Buf: append([]byte(nil), p.Lent...), Peer: p.Peer})
		}
		if k, err := b.PollBatch(readBufs(1)); k != 0 || err != nil {
			t.Fatalf("PollBatch during a loan = %d, %v", k, err)
		}
		ln.ReturnLent()
	}
	checkReceived(t, got, sent, a.LocalAddr(), b.LocalAddr())
}

// pollN polls l with bufs until it has n packets, for up to 5 s, and
// returns copies of them (buffer, peer, CE mark).
func pollN(t *testing.T, l Link, bufs []Packet, n int) []Packet {
	t.Helper()
	var got []Packet
	for deadline := time.Now().Add(5 * time.Second); len(got) < n && time.Now().Before(deadline); {
		k, err := l.PollBatch(bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range bufs[:k] {
			got = append(got, Packet{Buf: append([]byte(nil), p.Buf...), Peer: p.Peer, CE: p.CE})
		}
		for i := range bufs {
			bufs[i].Buf = bufs[i].Buf[:cap(bufs[i].Buf)]
		}
	}
	return got
}

// TestPollBatchSizes: reads of 1, 2, 5 and MaxBatch packets at a time,
// with empty polls between them, return every packet whole, in order and
// from the right peer, GSO runs split into their segments, as the number
// of datagrams per round changes (a UDP link sets up again only the
// message headers a read changed; TestUDPGROCE checks what a stale one
// would lose).
func TestPollBatchSizes(t *testing.T) {
	for name, l := range pollLinks(t) {
		t.Run(name, func(t *testing.T) {
			a, b := l[0], l[1]
			for round := range 12 {
				bufs := readBufs(MaxBatch)
				if n, err := b.PollBatch(bufs); n != 0 || err != nil {
					t.Fatalf("round %d: PollBatch on an empty link = %d, %v", round, n, err)
				}
				sent := batch(1+round%7, b.LocalAddr())
				for i := range 5 { // a run of one size: one GSO datagram where the link segments
					sent = append(sent, Packet{Buf: buildPacket(make([]byte, MaxPacket), 0x11, uint32(100+i), 1000, byte(i)), Peer: b.LocalAddr()})
				}
				if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
					t.Fatalf("round %d: WriteBatch = %d, %v", round, n, err)
				}
				bufs = bufs[:[]int{1, 2, 5, MaxBatch}[round%4]]
				checkReceived(t, pollN(t, b, bufs, len(sent)), sent, a.LocalAddr(), b.LocalAddr())
			}
		})
	}
}
