package linktest_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/fault"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/link/memlink"
	"github.com/goroce/goroce/internal/link/shm"
	"github.com/goroce/goroce/internal/link/udp"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// The contract every backend keeps (package link), checked on each: UDP
// with and without GSO, the same-host mux, a fault stage in front of UDP
// (active, changing nothing), and the memory pair.

// pollKinds are the backends the read tests run on.
var pollKinds = []string{"udp", "udp/NoGSO", "samehost", "fault", "mem"}

// pairOf opens two links of a kind, on free ports of 127.0.0.1 and
// 127.0.0.2 (or two addresses of 198.18.0.0/15 for the memory pair).
func pairOf(t *testing.T, kind string) (link.Link, link.Link) {
	t.Helper()
	open := func(ip string) link.Link {
		addr := linktest.FreePort(t, ip)
		var l link.Link
		var err error
		switch kind {
		case "udp":
			l, err = udp.Listen(udp.Config{Addr: addr})
		case "udp/NoGSO":
			l, err = udp.Listen(udp.Config{Addr: addr, NoGSO: true})
		case "samehost":
			var u *udp.Link
			if u, err = udp.Listen(udp.Config{Addr: addr}); err == nil {
				if l, err = shm.New(u, shm.Config{Dir: stats.Dir()}); err != nil {
					u.Close()
				}
			}
		case "fault":
			var u *udp.Link
			if u, err = udp.Listen(udp.Config{Addr: addr, PlainSend: true}); err == nil {
				if l, err = fault.Wrap(u, fault.Config{Seed: 1, CEMark: 1e-12}); err != nil {
					u.Close()
				}
			}
		default:
			t.Fatalf("no link kind %q", kind)
		}
		if err != nil {
			t.Skipf("%s: %v", kind, err)
		}
		return l
	}
	if kind == "mem" {
		a, b := memlink.NewPair(netip.MustParseAddrPort("198.18.0.1:4791"), netip.MustParseAddrPort("198.18.0.2:4791"))
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}
	a, b := open("127.0.0.1"), open("127.0.0.2")
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// kind returns pairOf for one kind, for a table of openers.
func kind(k string) func(t *testing.T) (link.Link, link.Link) {
	return func(t *testing.T) (link.Link, link.Link) { return pairOf(t, k) }
}

// checkReceived is linktest.CheckReceived for a kind of link: a UDP link
// that segments gives each packet of a super-packet the IPv4 ID the
// kernel gives its segment (udp.SegmentIDs).
func checkReceived(t *testing.T, kind string, got, sent []link.Packet, from, to netip.AddrPort) {
	t.Helper()
	ids := make([]uint16, len(sent))
	if kind == "udp" {
		ids = udp.SegmentIDs(sent)
	}
	linktest.CheckReceivedIDs(t, got, sent, ids, from, to)
}

// TestPollBatch: PollBatch returns 0 at once on an empty link, and the
// packets, checked, once they are there.
func TestPollBatch(t *testing.T) {
	for _, name := range pollKinds {
		t.Run(name, func(t *testing.T) {
			a, b := pairOf(t, name)
			bufs := linktest.ReadBufs(link.MaxBatch)
			start := time.Now()
			if n, err := b.PollBatch(bufs); n != 0 || err != nil {
				t.Fatalf("PollBatch on an empty link = %d, %v", n, err)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("PollBatch on an empty link took %v", d)
			}
			sent := linktest.Batch(20, b.LocalAddr())
			if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			checkReceived(t, name, linktest.PollN(t, b, bufs, len(sent)), sent, a.LocalAddr(), b.LocalAddr())
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
	for _, name := range pollKinds {
		t.Run(name, func(t *testing.T) {
			a, b := pairOf(t, name)
			bufs := linktest.ReadBufs(link.MaxBatch)
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
			sent := linktest.Batch(1, b.LocalAddr())
			if n, err := a.WriteBatch(sent); n != 1 || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			if r := waitFor(ch, "a packet"); r.n != 1 || r.err != nil {
				t.Fatalf("ReadBatch = %d, %v", r.n, r.err)
			}
		})
	}
}

// TestPollBatchSizes: reads of 1, 2, 5 and link.MaxBatch packets at a time,
// with empty polls between them, return every packet whole, in order and
// from the right peer, GSO runs split into their segments, as the number
// of datagrams per round changes (a UDP link sets up again only the
// message headers a read changed; TestUDPGROCE checks what a stale one
// would lose).
func TestPollBatchSizes(t *testing.T) {
	for _, name := range pollKinds {
		t.Run(name, func(t *testing.T) {
			a, b := pairOf(t, name)
			for round := range 12 {
				bufs := linktest.ReadBufs(link.MaxBatch)
				if n, err := b.PollBatch(bufs); n != 0 || err != nil {
					t.Fatalf("round %d: PollBatch on an empty link = %d, %v", round, n, err)
				}
				sent := linktest.Batch(1+round%7, b.LocalAddr())
				for i := range 5 { // a run of one size: one GSO datagram where the link segments
					sent = append(sent, link.Packet{Buf: linktest.BuildPacket(make([]byte, link.MaxPacket), 0x11, uint32(100+i), 1000, byte(i)), Peer: b.LocalAddr()})
				}
				if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
					t.Fatalf("round %d: WriteBatch = %d, %v", round, n, err)
				}
				bufs = bufs[:[]int{1, 2, 5, link.MaxBatch}[round%4]]
				checkReceived(t, name, linktest.PollN(t, b, bufs, len(sent)), sent, a.LocalAddr(), b.LocalAddr())
			}
		})
	}
}

// gathered returns pkts with their payloads moved out of Buf
// (Packet.Payload, Split), as a QP that sends from the MR emits them.
func gathered(pkts []link.Packet) []link.Packet {
	out := make([]link.Packet, len(pkts))
	for i, p := range pkts {
		n := len(p.Buf) - wire.BTHLen - wire.ICRCLen
		payload := bytes.Clone(p.Buf[wire.BTHLen : wire.BTHLen+n])
		b := make([]byte, 0, link.MaxPacket)
		b = append(append(b, p.Buf[:wire.BTHLen]...), p.Buf[wire.BTHLen+n:]...)
		out[i] = link.Packet{Buf: b, Split: wire.BTHLen, Payload: payload, Peer: p.Peer}
	}
	return out
}

// TestGatherWrite: a gathered packet arrives as the packet it stands for,
// ICRC included, over every path: UDP (with and without GSO, and a run of
// small packets that a UDP link with GSO puts together in its stage), the
// same-host ring, the memory pair, and UDP through a fault stage; the
// link counts the whole packets' bytes.
func TestGatherWrite(t *testing.T) {
	mem := func(t *testing.T) (link.Link, link.Link) {
		a, b := memlink.NewPair(linktest.MustParse("10.0.0.1:4791"), linktest.MustParse("10.0.0.2:4791"))
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (link.Link, link.Link)
	}{
		{"udp", kind("udp")},
		{"udp-nogso", kind("udp/NoGSO")},
		{"samehost", kind("samehost")},
		{"fault", kind("fault")}, // active, changes nothing
		{"mem", mem},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.open(t)
			want := linktest.Batch(12, b.LocalAddr())
			for i := range 8 {
				want = append(want, link.Packet{Buf: linktest.BuildPacket(make([]byte, link.MaxPacket), 0x11, uint32(100+i), 64, byte(i)), Peer: b.LocalAddr()})
			}
			sent := gathered(want)
			if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			var bytes uint64
			for _, p := range want {
				bytes += uint64(len(p.Buf))
			}
			if st := a.Stats(); st[stats.LinkSentPkts] != uint64(len(want)) || st[stats.LinkSentBytes] != bytes {
				t.Errorf("Stats: %d packets, %d bytes sent; want %d, %d", st[stats.LinkSentPkts], st[stats.LinkSentBytes], len(want), bytes)
			}
			checkReceived(t, tc.name, linktest.ReadN(t, b, len(want)), want, a.LocalAddr(), b.LocalAddr())
			if tc.name == "samehost" && a.Stats()[stats.SameHostPkts] != uint64(len(want)) {
				t.Errorf("samehost_pkts %d, want %d", a.Stats()[stats.SameHostPkts], len(want))
			}
		})
	}
}

// TestGatherRefused: a gathered packet too long for link.MaxPacket, or whose
// split is outside its headers, is refused, never sent cut (the memory
// pair too).
func TestGatherRefused(t *testing.T) {
	for _, k := range []string{"udp", "samehost", "fault"} {
		a, b := pairOf(t, k)
		long := gathered(linktest.Batch(6, b.LocalAddr()))[5]
		long.Payload = make([]byte, link.MaxPacket)
		split := gathered(linktest.Batch(6, b.LocalAddr()))[5]
		split.Split = len(split.Buf)
		for _, p := range []link.Packet{long, split} {
			if n, err := a.WriteBatch([]link.Packet{p}); n != 0 || err != link.ErrPacketSize {
				t.Errorf("%s: WriteBatch of a bad gathered packet = %d, %v; want ErrPacketSize", k, n, err)
			}
		}
	}
	a, b := memlink.NewPair(linktest.MustParse("10.0.0.1:4791"), linktest.MustParse("10.0.0.2:4791"))
	defer a.Close()
	defer b.Close()
	p := gathered(linktest.Batch(6, b.LocalAddr()))[5]
	p.Split = 2
	if n, err := a.WriteBatch([]link.Packet{p}); n != 0 || err != link.ErrPacketSize {
		t.Errorf("memory pair: WriteBatch of a bad gathered packet = %d, %v; want link.ErrPacketSize", n, err)
	}
}
