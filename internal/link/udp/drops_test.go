//go:build linux

package udp

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/stats"
)

// TestUDPSocketDrops: datagrams the kernel drops on a full receive buffer
// are counted (SO_RXQ_OVFL) once the link reads again, and with what did
// arrive they add up to what was sent.
func TestUDPSocketDrops(t *testing.T) {
	for _, noGSO := range []bool{true, false} {
		a, b := udpPairConfig(t, "127.0.0.1", "127.0.0.2", Config{NoGSO: noGSO, ReadBuffer: 64 << 10})
		const rounds, per = 10, 64
		for range rounds {
			pkts := linktest.Batch(per, b.LocalAddr())
			for i := range pkts { // one size: with GSO, whole super-packets are dropped
				pkts[i].Buf = linktest.BuildPacket(pkts[i].Buf[:cap(pkts[i].Buf)], 0x11, uint32(i), 1024, byte(i))
			}
			if n, err := a.WriteBatch(pkts); n != per || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
		}
		// Something must arrive after the drops for the count to show.
		time.Sleep(10 * time.Millisecond)
		bufs := linktest.ReadBufs(link.MaxBatch)
		got := 0
		for {
			n, err := b.PollBatch(bufs)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			got += n
			for i := range bufs {
				bufs[i].Buf = bufs[i].Buf[:cap(bufs[i].Buf)]
			}
		}
		last := linktest.Batch(1, b.LocalAddr())
		if n, err := a.WriteBatch(last); n != 1 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		got += len(linktest.ReadN(t, b, 1))
		s := b.Stats()
		if s[stats.SocketDrops] == 0 {
			t.Fatalf("NoGSO %v: %d of %d packets arrived through a 64 KiB buffer, and no drop was counted", noGSO, got, rounds*per+1)
		}
		if noGSO && got+int(s[stats.SocketDrops]) != rounds*per+1 {
			t.Errorf("%d packets arrived and %d were dropped, want %d in all", got, s[stats.SocketDrops], rounds*per+1)
		}
	}
}
