package verbs

import (
	"fmt"
	"testing"
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
