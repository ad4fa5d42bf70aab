package device

import (
	"net/netip"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/link/memlink"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/stats"
)

// TestBusyPollPingPong: a WRITE ping-pong in which each side waits by
// busy-polling its engine: every WRITE lands and completes, and nothing is
// resent on a lossless link (the ACKs a poller holds back go out with its
// next post, the last ones when polling ends).
func TestBusyPollPingPong(t *testing.T) {
	for _, kind := range engineKinds {
		t.Run(kind, func(t *testing.T) {
			a, b := pairOf(t, kind, 1<<16)
			const rounds = 200
			for i := 1; i <= rounds; i++ {
				a.write(t, i, b)
				if !b.e.BusyPoll(5*time.Second, func() bool { return b.mr.RemoteWrites() == uint64(i) }) {
					t.Fatalf("write %d from a did not land", i)
				}
				b.write(t, i, a)
				if !a.e.BusyPoll(5*time.Second, func() bool { return a.mr.RemoteWrites() == uint64(i) }) {
					t.Fatalf("write %d from b did not land", i)
				}
			}
			a.e.EndPoll()
			b.e.EndPoll()
			a.cq.wait(t, rounds)
			b.cq.wait(t, rounds)
			noRetries(t, a)
			noRetries(t, b)
		})
	}
}

// TestBusyPollLongTurn: a poller on the only P that lets a worker run a
// turn longer than pollGrace still gets the link from the reader at once:
// its poll is stamped with the clock read after the worker's turn, so the
// reader does not take the stamp for a poller gone and parks.
func TestBusyPollLongTurn(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	e, _ := newEngines(t, "udp")
	e.EndPoll()
	// A reader late now and then (the race detector, a busy machine) can
	// miss a hand-off; with a stale stamp it misses every one. So a set
	// where half the hand-offs waited is tried again, up to 3 times.
	const rounds, sets = 6, 3
	var waits int64
	for range sets {
		before := e.poll.graceWaits.Load()
		for i := range rounds {
			ran := false
			done := make(chan struct{})
			// A turn queued for a worker, longer than pollGrace, that the
			// poller's first Gosched runs.
			if !e.workers[0].send(event{kind: evCall, done: done, fn: func() {
				for start := time.Now(); time.Since(start) < 2*pollGrace; {
				}
				ran = true
			}}) {
				t.Fatal("worker stopped")
			}
			e.BusyPoll(pollGrace/4, func() bool { return false })
			<-done
			if !ran {
				t.Fatalf("round %d: the worker's turn did not run", i)
			}
			e.EndPoll()
			runtime.Gosched() // the reader goes back to the link
		}
		if waits = e.poll.graceWaits.Load() - before; waits < rounds/2 {
			return
		}
	}
	t.Errorf("in each of %d sets, %d or more of %d hand-offs waited out pollGrace for a reader that did not park (last: %d)",
		sets, rounds/2, rounds, waits)
}

// TestTakeBack: the reader takes the link back from a poller gone quiet
// only if no poller polled since it looked.
func TestTakeBack(t *testing.T) {
	var p poller
	p.init()
	old := monotime.Now().Add(-2 * pollGrace)
	p.lastPoll.Store(int64(old))
	p.lastPoll.Store(int64(monotime.Now())) // the poller comes back
	if p.takeBack(old) {
		t.Fatal("the reader took the link back from a poller that came back")
	}
	if p.lastPoll.Load() == 0 {
		t.Fatal("the failed take-back ended polling")
	}
	last := monotime.Time(p.lastPoll.Load())
	if !p.takeBack(last) || p.lastPoll.Load() != 0 {
		t.Fatal("the reader could not take the link back from a poller gone quiet")
	}
}

// TestParkWhilePolled: the reader stays parked for as long as a poller
// polls, takes the link back at once when polling ends, and pollGrace
// after the last poll of a poller that went away without ending.
func TestParkWhilePolled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		la, _ := memlink.NewPair(netip.MustParseAddrPort("198.18.0.1:4791"), netip.MustParseAddrPort("198.18.0.2:4791"))
		e := &Engine{link: la, stats: stats.New(), closing: make(chan struct{})}
		e.poll.init()
		for _, end := range []string{"EndPoll", "gone"} {
			e.poll.lastPoll.Store(int64(monotime.Now()))
			done := make(chan bool, 1)
			go func() { done <- e.parkWhilePolled() }()
			for range 20 { // a poller polling every 0.9 grace periods
				time.Sleep(pollGrace * 9 / 10)
				e.poll.lastPoll.Store(int64(monotime.Now()))
				synctest.Wait()
				select {
				case <-done:
					t.Fatalf("%s: the reader took the link back while a poller polled", end)
				default:
				}
			}
			start := monotime.Now()
			if end == "EndPoll" {
				e.EndPoll()
			}
			if ok := <-done; !ok {
				t.Fatalf("%s: parkWhilePolled = false; the engine is not stopping", end)
			}
			want := time.Duration(0)
			if end == "gone" {
				want = pollGrace
			}
			if d := monotime.Since(start); d != want {
				t.Errorf("%s: the reader took the link back after %v, want %v", end, d, want)
			}
		}
	})
}

// TestCloseWhilePolled: an engine closes at once while its reader is
// parked for a poller.
func TestCloseWhilePolled(t *testing.T) {
	for _, kind := range engineKinds {
		t.Run(kind, func(t *testing.T) {
			e, _ := newEngines(t, kind)
			e.Progress()
			done := make(chan struct{})
			go func() { e.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Close hangs while the engine is polled")
			}
		})
	}
}
