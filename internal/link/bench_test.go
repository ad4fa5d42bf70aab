package link

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/wire"
)

// benchStream measures one-way throughput from a to r, and closes a: one goroutine writes
// batches of 64 packets with a payload of size bytes until the reader has
// received b.N packets. b.N counts received packets, so MB/s is the
// delivered rate of UDP payload (BTH through ICRC).
func benchStream(b *testing.B, a, r Link, size int) {
	pkts := batch(64, r.LocalAddr())
	for i := range pkts {
		pkts[i].Buf = buildPacket(pkts[i].Buf[:cap(pkts[i].Buf)], 0x11, uint32(i), size, byte(i))
	}
	b.SetBytes(int64(len(pkts[0].Buf)))
	b.ReportAllocs()
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	b.ResetTimer()
	start := time.Now()
	go func() {
		defer wg.Done()
		for !done.Load() {
			_, err := a.WriteBatch(pkts)
			if err != nil {
				if !done.Load() {
					b.Error(err)
					r.Close() // unblocks the reader
				}
				return
			}
		}
	}()
	bufs := readBufs(MaxBatch)
	for got := 0; got < b.N; {
		n, err := r.ReadBatch(bufs)
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
	elapsed := time.Since(start)
	done.Store(true)
	b.StopTimer()
	a.Close() // unblocks a writer waiting for room
	wg.Wait()
	b.ReportMetric(float64(b.N)/elapsed.Seconds()/1e6, "Mpps")
}

func BenchmarkMemPair(b *testing.B) {
	for _, size := range []int{64, 4096} {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			x, y := NewMemPair(mustParse("10.0.0.1:4791"), mustParse("10.0.0.2:4791"))
			defer x.Close()
			defer y.Close()
			benchStream(b, x, y, size)
		})
	}
}

// BenchmarkUDP streams batches of equal packets to one peer: with GSO they
// travel as super-packets of up to 64 packets (15 of 4 KiB); NoGSO sends
// and receives one datagram per packet, for comparison.
func BenchmarkUDP(b *testing.B) {
	for _, tc := range []struct{ name, a, b string }{{"IPv4", "127.0.0.1", "127.0.0.2"}, {"IPv6", "::1", "::1"}} {
		for _, noGSO := range []bool{false, true} {
			for _, size := range []int{64, 4096} {
				name := tc.name + "/" + strconv.Itoa(size) + "B"
				if noGSO {
					name = tc.name + "/NoGSO/" + strconv.Itoa(size) + "B"
				}
				b.Run(name, func(b *testing.B) {
					x, y := udpPairConfig(b, tc.a, tc.b, UDPConfig{NoGSO: noGSO})
					benchStream(b, x, y, size)
				})
			}
		}
	}
}

// BenchmarkUDPWrite measures what WriteBatch costs its caller per packet:
// batches of 32 SENDs built as the transport builds them, headers in Buf
// and the payload gathered from elsewhere (Packet.Payload), to a link that
// another goroutine drains. The runs of equal packets leave as GSO
// super-packets; those of small segments are put together in the link's
// stage first (stageSegment).
func BenchmarkUDPWrite(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			x, y := udpPair(b, "127.0.0.1", "127.0.0.2")
			go func() {
				bufs := readBufs(MaxBatch)
				for {
					if _, err := y.ReadBatch(bufs); err != nil {
						return
					}
				}
			}()
			payload := make([]byte, size)
			pkts := make([]Packet, 32)
			bufs := readBufs(len(pkts))
			b.ReportAllocs()
			for b.Loop() {
				for i := range pkts {
					h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.OpSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: uint32(i)}}
					buf, split := wire.BuildGather(bufs[i].Buf, &h, size)
					pkts[i] = Packet{Buf: buf, Split: split, Payload: payload, Peer: y.LocalAddr()}
				}
				if _, err := x.WriteBatch(pkts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pkts)), "ns/pkt")
		})
	}
}
