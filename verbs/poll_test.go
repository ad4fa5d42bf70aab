package verbs

import (
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link/fault"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// TestBusyPoll runs a WRITE ping-pong in which each side waits by
// polling its device (Progress) instead of blocking: the writes must land,
// most of them read by the polling goroutine itself, and every WRITE must
// complete on its sender's CQ (the ACKs a poller holds back go out with
// the next post).
func TestBusyPoll(t *testing.T) {
	for _, lk := range links {
		t.Run(lk.name, func(t *testing.T) {
			a, b := pairOn(t, lk.open, 1<<16, MTU1024)
			polled := 0
			ping := func(from, to *endpoint, i int) {
				pingWrite(t, from, to, i, 100, func() { polled += to.dev.Progress() })
			}
			const rounds = 200
			for i := 1; i <= rounds; i++ {
				ping(a, b, i)
				ping(b, a, i)
			}
			if polled < rounds {
				t.Errorf("the pollers read %d packets of %d writes and their ACKs", polled, 2*rounds)
			}
			endPollAndComplete(t, rounds, a, b)
			noRetries(t, a)
			noRetries(t, b)
		})
	}
}

// TestBusyPollOneP: a poller on the process's only P reads what arrives
// from its first calls on. The reader waits in the Go netpoller holding
// the socket, and only a netpoller pass ends that wait; a poller that
// spins on the only P never gives the scheduler one, so without the
// hand-off in the first Progress call (dispatcher.handOff) the socket
// stayed with the reader for as long as the poller spun.
func TestBusyPollOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, lk := range links {
		t.Run(lk.name, func(t *testing.T) {
			a, b := pairOn(t, lk.open, 1<<16, MTU1024)
			write := func(i int) {
				t.Helper()
				_, err := a.qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
					SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
				must(t, err)
			}
			// A first write opens the same-host channel, which takes
			// longer than pollGrace; b's reader handles it.
			write(1)
			wait(t, a.cq, 1)
			// Count the writes b's poller read within pollGrace/2 of the
			// poll before them. A slow machine may miss some: the
			// kernel may leave loopback's delivery to ksoftirqd, which
			// this spinning thread keeps waiting, and a thread held up
			// for pollGrace lets the reader take the socket back, as it
			// should; a busy one (CI runs the packages' tests side by
			// side) may miss half of a set now and then, so a set of
			// rounds may be tried again, up to attempts in all. Without
			// the hand-off the poller read none of any set.
			const rounds, attempts = 20, 3
			i, polled := 1, 0
			for try := 1; ; try++ {
				polled = 0
				for range rounds {
					i++
					b.dev.Progress() // the first call hands the socket over
					start := time.Now()
					write(i) // a's idle worker writes it as PostSend runs
					n := 0
					for b.mr.RemoteWrites() != uint64(i) && time.Since(start) < pollGrace/2 {
						n += b.dev.Progress()
						runtime.Gosched()
					}
					if n > 0 && b.mr.RemoteWrites() == uint64(i) {
						polled++
					}
				}
				if polled >= rounds/2 {
					break
				}
				if try == attempts {
					t.Fatalf("b's poller read fewer than half the writes of each of %d sets within pollGrace/2 of its poll before them (the last: %d of %d)", attempts, polled, rounds)
				}
			}
			b.dev.EndPoll()
			for _, wc := range wait(t, a.cq, i-1) {
				if wc.Status != WCSuccess {
					t.Fatalf("%+v", wc)
				}
			}
			noRetries(t, a)
		})
	}
}

// endPollAndComplete ends polling on both sides and checks that each
// side's n signaled WRITEs complete: the ACKs a poller held back left with
// the next post, the last ones when polling ended.
func endPollAndComplete(t *testing.T, n int, a, b *endpoint) {
	t.Helper()
	a.dev.EndPoll()
	b.dev.EndPoll()
	for _, e := range []*endpoint{a, b} {
		for _, wc := range wait(t, e.cq, n) {
			if wc.Status != WCSuccess {
				t.Fatalf("%+v", wc)
			}
		}
	}
}

// noRetries fails the test if e's device retransmitted anything.
func noRetries(t *testing.T, e *endpoint) {
	t.Helper()
	if n := e.dev.Counters()["completer_retry_err"]; n != 0 {
		t.Errorf("%v retransmitted %d times on a lossless link", e.dev.Addr(), n)
	}
}

// TestBusyPollHeldAckReleased: a responder whose poller holds back the ACK
// of a WRITE and then stops polling, without posting or EndPoll, still
// acknowledges it: the reader writes held ACKs when it takes the socket
// back.
func TestBusyPollHeldAckReleased(t *testing.T) {
	for _, lk := range links {
		t.Run(lk.name, func(t *testing.T) {
			a, b := pairOn(t, lk.open, 1<<16, MTU1024)
			heldOnce := false
			for i := 1; i <= 3; i++ {
				// b writes too, as a ping-pong's side does: a poller's
				// turn holds ACKs only on a worker that sends requests.
				_, err := b.qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
					SGL: []SGE{b.mr.SGE(0, 8)}, RemoteAddr: a.mr.Addr() + 4096, RKey: a.mr.RKey()}})
				must(t, err)
				b.dev.Progress() // b polls before a's WRITE comes: its poller reads it
				_, err = a.qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
					SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
				must(t, err)
				if !b.dev.BusyPoll(5*time.Second, func() bool { return b.mr.RemoteWrites() == uint64(i) }) {
					t.Fatalf("write %d did not land: RemoteWrites = %d", i, b.mr.RemoteWrites())
				}
				heldOnce = heldOnce || held(b.dev)
				// b goes quiet; a's completion must still come.
				if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess || wc.WRID != uint64(i) {
					t.Fatalf("write %d: %+v", i, wc)
				}
				wait(t, b.cq, 1)
			}
			if !heldOnce {
				t.Error("b's poller never held an ACK back")
			}
			// By the held ACK itself, not by a retransmission after a's
			// ACK timeout, which b would have acknowledged anyway.
			noRetries(t, a)
		})
	}
}

// held reports whether a poller's turn holds ACKs back on one of d's
// workers.
func held(d *Device) bool { return d.eng.HoldsAcks() }

// pollGrace is how long the engine's reader stays off the socket after
// the last poll (internal/device).
const pollGrace = time.Millisecond

// TestBusyPollReceiverSendsAcks: a poller's turn on a device that only
// receives, a bandwidth test's server, writes its ACKs at once: with no
// answer of its own to come, holding them would only keep the sender's
// window shut longer.
func TestBusyPollReceiverSendsAcks(t *testing.T) {
	for _, lk := range links {
		t.Run(lk.name, func(t *testing.T) {
			a, b := pairOn(t, lk.open, 1<<16, MTU1024)
			for i := 1; i <= 20; i++ {
				b.dev.Progress() // b polls before a's WRITE comes: its poller reads it
				_, err := a.qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
					SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
				must(t, err)
				if !b.dev.BusyPoll(5*time.Second, func() bool { return b.mr.RemoteWrites() == uint64(i) }) {
					t.Fatalf("write %d did not land: RemoteWrites = %d", i, b.mr.RemoteWrites())
				}
				if held(b.dev) {
					t.Fatalf("write %d: a device that only receives held its ACK back", i)
				}
			}
			b.dev.EndPoll()
			wait(t, a.cq, 20)
		})
	}
}

// TestBusyPollTimeout: BusyPoll gives up after its spin with nothing to
// find, and the device goes on working without a poller.
func TestBusyPollTimeout(t *testing.T) {
	a, b := pair(t, 1<<16, MTU1024)
	start := time.Now()
	if b.dev.BusyPoll(5*time.Millisecond, func() bool { return b.mr.RemoteWrites() > 0 }) {
		t.Fatal("BusyPoll found a write nobody sent")
	}
	if d := time.Since(start); d < 5*time.Millisecond || d > 5*time.Second {
		t.Fatalf("BusyPoll(5ms) took %v", d)
	}
	_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled,
		SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	must(t, err)
	if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess {
		t.Fatalf("%+v", wc)
	}
}

// TestBusyPollSharesP: a goroutine that shares the poller's only P runs
// while the poller finds nothing: the poller lets it in every schedEvery
// (not after every empty poll, but long before the runtime would preempt
// it, 10 ms).
func TestBusyPollSharesP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	da, _ := newUDPDevices(t)
	for i := range 20 {
		var ran atomic.Bool
		go ran.Store(true)
		start := time.Now()
		if !da.BusyPoll(5*time.Millisecond, ran.Load) {
			t.Fatalf("try %d: the goroutine beside the poller did not run in 5 ms", i)
		}
		if d := time.Since(start); d > 2*time.Millisecond {
			t.Logf("try %d: the goroutine ran after %v", i, d)
		}
	}
}

// TestPolledCountersPublished: what the link counted while a goroutine
// polled (here an ICRC error) reaches the device's published counters
// when polling ends, though a poll copies them at most every
// linkCountsEvery and the reader, taking the socket back, copies them only
// after its next batch. The counters are read as another process reads
// the file, not through Device.Counters, which copies them itself.
func TestPolledCountersPublished(t *testing.T) {
	_, db := newUDPDevices(t)
	db.Progress() // the poller takes the socket
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(db.eng.Link().LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bad := make([]byte, wire.BTHLen+wire.ICRCLen) // a BTH and an ICRC that does not match it
	bad[0], bad[len(bad)-1] = byte(wire.OpSendOnly), 0x5a
	if _, err := c.Write(bad); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); db.eng.Link().Stats()[stats.ICRCErrors] == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the poller never read the damaged datagram")
		}
		db.Progress()
	}
	db.EndPoll()
	if n := db.stats.Get(stats.ICRCErrors); n != 1 {
		t.Errorf("published icrc_errors %d after polling ended, want 1", n)
	}
}

// TestCloseWhilePolled: a device closes at once while its reader is
// parked for a poller.
func TestCloseWhilePolled(t *testing.T) {
	for _, lk := range links {
		t.Run(lk.name, func(t *testing.T) {
			da, _ := lk.open(t)
			da.Progress()
			time.Sleep(time.Millisecond / 10)
			done := make(chan struct{})
			go func() { da.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Close hangs while the device is polled")
			}
		})
	}
}

// TestBusyPollLossy: the WRITE ping-pong of TestBusyPoll over a link that
// drops, duplicates and reorders packets: held ACKs that are lost, and
// answers whose ACK goes after them, must still end in every WRITE placed
// once and completed.
func TestBusyPollLossy(t *testing.T) {
	a4, b4 := netip.MustParseAddrPort("198.18.2.1:4791"), netip.MustParseAddrPort("198.18.2.2:4791")
	fa, err := fault.Parse("drop=5%,dup=2%,reorder=5%,window=4,seed=31")
	must(t, err)
	fb, err := fault.Parse("drop=5%,dup=2%,reorder=5%,window=4,seed=32")
	must(t, err)
	la, lb := faultyPair(t, a4, b4, fa, fb)
	da, db := openPair(t, Config{Addr: a4.Addr(), Link: la, MTU: 9000}, Config{Addr: b4.Addr(), Link: lb, MTU: 9000})
	a, b := newEndpoint(t, da, 1<<16), newEndpoint(t, db, 1<<16)
	connect(t, a, b, MTU1024)
	const rounds = 100
	for i := 1; i <= rounds; i++ {
		pingWrite(t, a, b, i, 100, func() { b.dev.Progress() })
		pingWrite(t, b, a, i, 100, func() { a.dev.Progress() })
	}
	endPollAndComplete(t, rounds, a, b)
	if s := da.Counters(); s["fault_dropped"] == 0 {
		t.Errorf("the link dropped nothing: %v", s)
	}
}
