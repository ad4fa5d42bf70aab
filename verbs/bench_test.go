package verbs

import (
	"fmt"
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
