//go:build linux

package udp

import (
	"strconv"
	"testing"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/wire"
)

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
					x, y := udpPairConfig(b, tc.a, tc.b, Config{NoGSO: noGSO})
					linktest.Stream(b, x, y, size)
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
				bufs := linktest.ReadBufs(link.MaxBatch)
				for {
					if _, err := y.ReadBatch(bufs); err != nil {
						return
					}
				}
			}()
			payload := make([]byte, size)
			pkts := make([]link.Packet, 32)
			bufs := linktest.ReadBufs(len(pkts))
			b.ReportAllocs()
			for b.Loop() {
				for i := range pkts {
					h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.OpSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: uint32(i)}}
					buf, split := wire.BuildGather(bufs[i].Buf, &h, size)
					pkts[i] = link.Packet{Buf: buf, Split: split, Payload: payload, Peer: y.LocalAddr()}
				}
				if _, err := x.WriteBatch(pkts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pkts)), "ns/pkt")
		})
	}
}
