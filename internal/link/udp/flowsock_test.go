//go:build linux

package udp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/stats"
)

// TestFlowTurns follows where a busy poller's reads look with a flow
// socket: every poll at the busy socket (when neither is, the one that
// brought the last datagrams, at first the flow socket), at the other
// every flowMainEvery polls and first then, and at both, in turns, when
// both are busy.
func TestFlowTurns(t *testing.T) {
	type look struct {
		flow bool
		k    int // datagrams found
	}
	// run polls once: looks are what each look finds, in the order the
	// poll takes them; a poll stops at the first look that finds some.
	run := func(tt *flowTurns, finds func(flow bool) int) []look {
		looks, n := tt.plan()
		var got []look
		for _, flow := range looks[:n] {
			k := finds(flow)
			tt.looked(flow, k)
			got = append(got, look{flow, k})
			if k > 0 {
				break
			}
		}
		return got
	}
	nothing := func(bool) int { return 0 }
	onFlow := func(flow bool) int {
		if flow {
			return 1
		}
		return 0
	}
	onMain := func(flow bool) int {
		if flow {
			return 0
		}
		return 3
	}
	everywhere := func(bool) int { return 2 }

	for _, tc := range []struct {
		name  string
		finds func(bool) int
	}{{"both idle", nothing}, {"a stream on the flow socket", onFlow}} {
		t.Run(tc.name, func(t *testing.T) {
			tt := flowTurns{lastFlow: true} // as adoptFlow starts it
			mainLooks := 0
			for i := range 4 * flowMainEvery {
				got := run(&tt, tc.finds)
				last := got[len(got)-1]
				if !last.flow {
					t.Fatalf("poll %d ended at the bound socket: %v", i, got)
				}
				if len(got) == 2 {
					mainLooks++
					if (i+1)%flowMainEvery != 0 {
						t.Errorf("poll %d looked at the bound socket, want every %dth", i, flowMainEvery)
					}
				}
			}
			if mainLooks != 4 {
				t.Errorf("the bound socket looked at %d times in %d polls, want 4", mainLooks, 4*flowMainEvery)
			}
		})
	}
	t.Run("a stream on the bound socket", func(t *testing.T) {
		tt := flowTurns{lastFlow: true}
		// Both idle: the bound socket is looked at, and found busy, on the
		// flowMainEvery-th poll.
		for i := range flowMainEvery {
			if got := run(&tt, onMain); got[0].flow == (i == flowMainEvery-1) {
				t.Fatalf("poll %d of an idle pair: %v", i, got)
			}
		}
		flowLooks := 0
		for i := range 4 * flowMainEvery {
			got := run(&tt, onMain)
			if got[len(got)-1].flow || got[len(got)-1].k != 3 {
				t.Fatalf("poll %d did not end at the bound socket: %v", i, got)
			}
			if len(got) == 2 {
				flowLooks++
			}
		}
		if flowLooks != 4 {
			t.Errorf("the flow socket looked at %d times in %d polls, want 4", flowLooks, 4*flowMainEvery)
		}
		// Once the flow socket has datagrams, both are busy and take turns.
		run(&tt, everywhere)
		for range flowMainEvery {
			run(&tt, everywhere)
		}
		prev := run(&tt, everywhere)
		for i := range 6 {
			got := run(&tt, everywhere)
			if len(got) != 1 || got[0].flow == prev[0].flow {
				t.Fatalf("poll %d with both busy: %v after %v, want the other socket alone", i, got, prev)
			}
			prev = got
		}
		// A stream that moves to the flow socket alone gets every poll,
		// and the bound socket, idle now, one in flowMainEvery.
		run(&tt, onFlow)
		mainLooks := 0
		for i := range 2 * flowMainEvery {
			got := run(&tt, onFlow)
			if last := got[len(got)-1]; !last.flow || last.k != 1 {
				t.Fatalf("poll %d after the bound socket went idle: %v", i, got)
			}
			if len(got) == 2 {
				mainLooks++
			}
		}
		if mainLooks != 2 {
			t.Errorf("the idle bound socket looked at %d times in %d polls, want 2", mainLooks, 2*flowMainEvery)
		}
	})
	// A ping-pong on another connection than the flow socket's: its
	// datagrams come to the bound socket, one every few polls. Once one
	// has, the bound socket is looked at first on every poll, as the
	// flow socket is in its own ping-pong, and the flow socket on one in
	// flowMainEvery.
	t.Run("a ping-pong on the bound socket", func(t *testing.T) {
		tt := flowTurns{lastFlow: true}
		queued, waited := 0, 0 // datagrams on the bound socket, and polls the oldest has waited
		mainFinds := func(flow bool) int {
			if flow || queued == 0 {
				return 0
			}
			k := queued
			queued, waited = 0, 0
			return k
		}
		flowFirst, worst := 0, 0
		const polls = 20 * flowMainEvery
		for poll := range polls {
			if poll%5 == 0 {
				queued++ // the peer's answer arrives
			}
			got := run(&tt, mainFinds)
			if got[0].flow && poll >= flowMainEvery {
				flowFirst++
			}
			if queued > 0 {
				waited++
				if poll >= flowMainEvery {
					worst = max(worst, waited)
				}
			}
		}
		// The first datagram waits for the bound socket's turn; after it
		// each is read by the poll it arrives before.
		if flowFirst > polls/flowMainEvery || worst > 0 {
			t.Errorf("after the first answer: the flow socket looked at first on %d of %d polls, an answer waited up to %d polls; want at most one in %d, none",
				flowFirst, polls-flowMainEvery, worst, flowMainEvery)
		}
	})
}

// TestUDPFlowSocket connects a link to a peer's flow and checks that the
// flow's datagrams come through its flow socket, to a reader that was
// already waiting, to a busy poller and to a reader waiting again, that
// other sources still reach the bound socket, that a link opens one flow
// socket at most, and that the bound socket's port stays its own.
func TestUDPFlowSocket(t *testing.T) {
	for _, tc := range []struct{ name, a, b, c string }{
		{"IPv4", "127.0.0.1", "127.0.0.2", "127.0.0.3"},
		{"IPv6", "::1", "::1", "::1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := udpPair(t, tc.a, tc.b)
			sport := link.FlowSourcePort(0, 0x11, 0x12)
			flowFrom := netip.AddrPortFrom(a.LocalAddr().Addr(), sport)

			// A reader waits before b connects: the flow socket's first
			// datagram must wake it.
			type result struct {
				pkts []link.Packet
				err  error
			}
			done := make(chan result, 1)
			go func() {
				bufs := linktest.ReadBufs(link.MaxBatch)
				n, err := b.ReadBatch(bufs)
				done <- result{bufs[:n], err}
			}()
			time.Sleep(20 * time.Millisecond)
			b.ConnectPort(sport, a.LocalAddr())
			a.ConnectPort(sport, b.LocalAddr())
			if s := b.Stats(); s[stats.FlowSockets] != 1 {
				t.Fatalf("FlowSockets = %d after ConnectPort, want 1", s[stats.FlowSockets])
			}
			send := func(from *Link, port uint16, n int) []link.Packet {
				t.Helper()
				pkts := linktest.Batch(n, b.LocalAddr())
				for i := range pkts {
					pkts[i].SrcPort = port
				}
				if k, err := from.WriteBatch(pkts); k != n || err != nil {
					t.Fatalf("WriteBatch = %d, %v", k, err)
				}
				return pkts
			}
			sent := send(a, sport, 1)
			select {
			case r := <-done:
				if r.err != nil || len(r.pkts) != 1 {
					t.Fatalf("waiting ReadBatch = %d packets, %v", len(r.pkts), r.err)
				}
				linktest.CheckReceivedIDs(t, r.pkts, sent, wantIDs(a, sent), flowFrom, b.LocalAddr())
			case <-time.After(5 * time.Second):
				t.Fatal("a reader waiting before the flow socket opened never got its datagram")
			}
			if s := b.Stats(); s[stats.FlowDatagrams] != 1 {
				t.Errorf("FlowDatagrams = %d, want 1", s[stats.FlowDatagrams])
			}

			// A waiting reader with the flow socket taken over.
			sent = send(a, sport, 6)
			got := linktest.ReadN(t, b, len(sent))
			linktest.CheckReceivedIDs(t, got, sent, wantIDs(a, sent), flowFrom, b.LocalAddr())
			flowed := b.Stats()[stats.FlowDatagrams]
			if flowed < 2 {
				t.Errorf("FlowDatagrams = %d after 7 packets of the flow, want them there", flowed)
			}

			// Another source (its own port, or another link) reaches the
			// bound socket.
			c, err := Listen(Config{Addr: linktest.FreePort(t, tc.c)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, o := range []struct {
				from *Link
				port uint16
			}{{a, link.SourcePort(0x21)}, {c, 0}} {
				sent = send(o.from, o.port, 3)
				got = linktest.ReadN(t, b, len(sent))
				from := o.from.LocalAddr()
				if o.port != 0 {
					from = netip.AddrPortFrom(from.Addr(), o.port)
				}
				linktest.CheckReceivedIDs(t, got, sent, wantIDs(o.from, sent), from, b.LocalAddr())
			}
			if s := b.Stats(); s[stats.FlowDatagrams] != flowed {
				t.Errorf("FlowDatagrams = %d after datagrams from other sources, want %d", s[stats.FlowDatagrams], flowed)
			}

			// A busy poller reads the flow socket and, within
			// flowMainEvery polls, the bound one.
			b.Interrupt()
			if n, err := b.ReadBatch(linktest.ReadBufs(1)); n != 0 || err != nil {
				t.Fatalf("ReadBatch after Interrupt = %d, %v", n, err)
			}
			sent = send(a, sport, 2)
			other := send(c, 0, 2)
			byPeer := map[netip.AddrPort][]link.Packet{}
			bufs := linktest.ReadBufs(link.MaxBatch)
			for deadline, n := time.Now().Add(5*time.Second), 0; n < 4; {
				if time.Now().After(deadline) {
					t.Fatalf("polling found %d of 4 packets", n)
				}
				k, err := b.PollBatch(bufs)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range bufs[:k] {
					byPeer[p.Peer] = append(byPeer[p.Peer], link.Packet{Buf: append([]byte(nil), p.Buf...), Peer: p.Peer})
				}
				n += k
			}
			linktest.CheckReceivedIDs(t, byPeer[flowFrom], sent, wantIDs(a, sent), flowFrom, b.LocalAddr())
			linktest.CheckReceivedIDs(t, byPeer[c.LocalAddr()], other, wantIDs(c, other), c.LocalAddr(), b.LocalAddr())

			// A reader waits again after polling, on both sockets.
			sent = send(a, sport, 2)
			got = linktest.ReadN(t, b, len(sent))
			linktest.CheckReceivedIDs(t, got, sent, wantIDs(a, sent), flowFrom, b.LocalAddr())

			// One flow socket per link.
			b.ConnectPort(link.SourcePort(0x31), a.LocalAddr())
			if s := b.Stats(); s[stats.FlowSockets] != 1 {
				t.Errorf("FlowSockets = %d after a second connection, want 1", s[stats.FlowSockets])
			}
			// The port is still the link's alone.
			if l, err := Listen(Config{Addr: b.LocalAddr()}); err == nil {
				l.Close()
				t.Error("a second link bound the first one's address and port")
			}
		})
	}
}
