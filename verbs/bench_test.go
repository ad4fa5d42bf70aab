package verbs

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkWrite measures RDMA WRITE throughput between two devices and
// the allocations per message (the data path must allocate nothing per
// packet; what remains per message is reported). Run with -benchmem.
func BenchmarkWrite(b *testing.B) {
	for _, lk := range links {
		for _, size := range []int{64, 4096, 65536} {
			b.Run(fmt.Sprintf("%s/%d", lk.name, size), func(b *testing.B) {
				x, y := pairOn(b, lk.open, 1<<20, MTU4096)
				wr := []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{x.mr.SGE(0, size)},
					RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
				wc := make([]WC, 16)
				const depth = 64
				inflight := 0
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; {
					for inflight < depth && i < b.N {
						if _, err := x.qp.PostSend(wr); err != nil {
							b.Fatal(err)
						}
						inflight++
						i++
					}
					n := x.cq.Poll(wc)
					for _, c := range wc[:n] {
						if c.Status != WCSuccess {
							b.Fatalf("WC %+v", c)
						}
					}
					inflight -= n
				}
				for inflight > 0 {
					inflight -= x.cq.Poll(wc)
				}
			})
		}
	}
}

// BenchmarkPingPong measures the round trip of a 2-byte RDMA WRITE
// ping-pong between two devices on UDP loopback sockets, each side
// waiting for the other's WRITE by busy polling (Device.BusyPoll), as
// ib_write_lat does. ns/op is one round trip: twice the one-way latency.
func BenchmarkPingPong(b *testing.B) {
	x, y := pairOn(b, newUDPDevices, 1<<16, MTU1024)
	done := make(chan struct{})
	// y answers each WRITE with one of its own, on its own goroutine.
	go func() {
		defer close(done)
		for i := 1; i <= b.N; i++ {
			if !waitWrites(y, uint64(i)) {
				return
			}
			postWrite(b, y, x)
		}
	}()
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		postWrite(b, x, y)
		if !waitWrites(x, uint64(i)) {
			b.Fatalf("round %d: no answer", i)
		}
	}
	b.StopTimer()
	<-done
}

// BenchmarkPingPongSeq is ib_write_lat's exchange, 2-byte signaled
// WRITEs, with one goroutine on one P playing both sides in turn: post,
// the peer's poll that finds the WRITE (a loopback sendmmsg has delivered
// it by the time it returns), the peer's answer, and the poll that finds
// it with the first WRITE's completion. Nothing waits and nothing is
// handed between goroutines, so ns/op is the round trip's work alone, and
// a CPU profile of it is the latency path's. Over UDP loopback (udp) that is the software and
// four system calls; over the in-memory link (mem) goroce's own work with
// none, the link's channel operations aside; over the same-host path
// (samehost) its rings. The WRs are built once, as perftest builds them:
// the exchange allocates nothing.
func BenchmarkPingPongSeq(b *testing.B) {
	for _, l := range []struct {
		name string
		open func(testing.TB) (*Device, *Device)
	}{{"udp", newUDPDevices}, {"mem", newDevices}, {"samehost", newSameHostDevices}} {
		b.Run(l.name, func(b *testing.B) { pingPongSeq(b, l.open) })
	}
}

func pingPongSeq(b *testing.B, open func(testing.TB) (*Device, *Device)) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	x, y := pairOn(b, open, 1<<16, MTU1024)
	pp := newPingPong(b, x, y)
	b.ReportAllocs()
	b.ResetTimer()
	pp.rounds(b.N)
}

// pingPong plays ib_write_lat's exchange between two endpoints on one
// goroutine: x WRITEs 2 signaled bytes to y, y polls until they land and
// answers with a WRITE of its own, and each takes the completion of its
// WRITE, whose ACK came with the peer's answer.
type pingPong struct {
	tb     testing.TB
	x, y   *endpoint
	xw, yw []SendWR
	wc     []WC
	done   uint64 // rounds played
}

func newPingPong(tb testing.TB, x, y *endpoint) *pingPong {
	wrs := func(e, peer *endpoint) []SendWR {
		return []SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{e.mr.SGE(0, 2)},
			RemoteAddr: peer.mr.Addr() + 1024, RKey: peer.mr.RKey()}}
	}
	return &pingPong{tb: tb, x: x, y: y, xw: wrs(x, y), yw: wrs(y, x), wc: make([]WC, 4)}
}

// until polls e's device until cond holds.
func (p *pingPong) until(e *endpoint, cond func() bool) {
	for !cond() {
		e.dev.BusyPoll(time.Second, cond)
	}
}

func (p *pingPong) post(e *endpoint, wr []SendWR) {
	if _, err := e.qp.PostSend(wr); err != nil {
		p.tb.Fatal(err)
	}
}

// completed takes e's completion of its last WRITE.
func (p *pingPong) completed(e *endpoint) {
	p.until(e, func() bool { return e.cq.Len() > 0 })
	if n := e.cq.Poll(p.wc); n != 1 || p.wc[0].Status != WCSuccess {
		p.tb.Fatalf("%d completions, first %+v", n, p.wc[0])
	}
}

// rounds plays n more rounds.
func (p *pingPong) rounds(n int) {
	x, y := p.x, p.y
	for range n {
		p.done++
		i := p.done
		p.post(x, p.xw)
		p.until(y, func() bool { return y.mr.RemoteWrites() >= i })
		if i > 1 {
			p.completed(y)
		}
		p.post(y, p.yw)
		p.until(x, func() bool { return x.mr.RemoteWrites() >= i })
		p.completed(x)
	}
}

// postWrite RDMA WRITEs 2 bytes from e to peer, unsignaled.
func postWrite(b *testing.B, e, peer *endpoint) {
	_, err := e.qp.PostSend([]SendWR{{Opcode: WRRDMAWrite, SGL: []SGE{e.mr.SGE(0, 2)},
		RemoteAddr: peer.mr.Addr() + 1024, RKey: peer.mr.RKey()}})
	if err != nil {
		b.Error(err)
	}
}

// waitWrites busy-polls e's device until e's MR has seen n remote writes,
// for up to 10 s.
func waitWrites(e *endpoint, n uint64) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if e.dev.BusyPoll(time.Millisecond, func() bool { return e.mr.RemoteWrites() >= n }) {
			return true
		}
	}
	return false
}

// BenchmarkBusyPollEmpty times one cycle of BusyPoll on a device whose
// socket has nothing to read: a message that arrives waits about half of
// it for the poll that finds it. Each BusyPoll call polls 16 times, a wait
// of the length of a ping-pong's, short of yieldAfter.
func BenchmarkBusyPollEmpty(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	x, _ := pairOn(b, newUDPDevices, 4096, MTU1024)
	x.dev.BusyPoll(time.Millisecond, func() bool { return false }) // the reader steps off
	n := 0
	done := func() bool { n++; return n%16 == 0 }
	b.ReportAllocs()
	b.ResetTimer()
	for n < b.N {
		x.dev.BusyPoll(time.Second, done)
	}
}
