package netns_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// lossRules drops drop‰ of the RoCEv2 packets arriving in a namespace and
// overwrites byte 12 of the UDP payload (the first after the BTH) in
// corrupt‰ of the rest, with the UDP checksum cleared so that only the
// ICRC can tell. The rules sit in prerouting, where a veth that segments
// on the wire (segmentOnWire) delivers one datagram per packet.
func lossRules(drop, corrupt int) string {
	return fmt.Sprintf(`table inet goroce {
	chain input {
		type filter hook prerouting priority filter; policy accept;
		udp dport 4791 counter comment "all"
		udp dport 4791 numgen random mod 1000 < %d counter drop comment "drop"
		udp dport 4791 numgen random mod 1000 < %d counter udp checksum set 0 @th,160,8 set 0x55 comment "corrupt"
	}
}
`, drop, corrupt)
}

// TestPingpongLoss runs rc_pingpong -c through a veth that drops and
// corrupts RoCEv2 packets each way, with the default retry_cnt 7 and
// timeout 14: every message must arrive intact.
func TestPingpongLoss(t *testing.T) {
	for _, tc := range []struct {
		vethMTU     int
		pathMTU     string
		size, iters int
		drop        int // per mille
	}{
		{1500, "1024", 256 << 10, 300, 20},
		{9000, "4096", 1 << 20, 100, 20},
		{9000, "4096", 4 << 20, 20, 50},
		{1500, "1024", 4 << 20, 20, 50},
	} {
		t.Run(fmt.Sprintf("mtu%s/%dKiB/drop%d", tc.pathMTU, tc.size>>10, tc.drop), func(t *testing.T) {
			tp := newTopology(t, tc.vethMTU)
			tp.segmentOnWire(t)
			tp.addRuleset(t, tp.a, lossRules(tc.drop, 2))
			tp.addRuleset(t, tp.b, lossRules(tc.drop, 2))
			ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
			defer cancel()
			t0 := time.Now()
			common := []string{"-m", tc.pathMTU, "-c", "-s", strconv.Itoa(tc.size), "-n", strconv.Itoa(tc.iters)}
			srv, cli := pair(t, ctx, tp, common, nil, nil, 140*time.Second)
			sc, cc := checkRun(t, srv, cli, tc.size, tc.iters)
			t.Logf("wall time %v", time.Since(t0).Round(time.Millisecond))
			t.Logf("server counters: %v", sc)
			t.Logf("client counters: %v", cc)
			for _, ns := range []string{tp.a, tp.b} {
				n := tp.nftCounters(t, ns)
				t.Logf("nft %s: %v", ns, n)
				if n["drop"] == 0 || n["corrupt"] == 0 {
					t.Errorf("nft in %s dropped %d and corrupted %d; want some of each", ns, n["drop"], n["corrupt"])
				}
			}
		})
	}
}

// BenchmarkLossGoodput measures rc_pingpong's goodput through the veth
// (MTU 9000, path MTU 4096) at random loss rates each way, with 0.2%
// corruption on top of every lossy rate, against the lossless run of the
// same size in the same sitting: docs/RELIABILITY.md's table. Each
// lossless sub-benchmark runs before the lossy ones of its size; a lossy
// one without it reports no ratio.
//
//	go test -run '^$' -bench LossGoodput ./test/netns   (as root)
func BenchmarkLossGoodput(b *testing.B) {
	lossless := map[int]float64{}
	for _, size := range []int{64 << 10, 1 << 20, 4 << 20} {
		iters := max(32, (128<<20)/size)
		for _, drop := range []int{0, 1, 10, 20, 50} {
			b.Run(fmt.Sprintf("size=%dKiB/loss=%g%%", size>>10, float64(drop)/10), func(b *testing.B) {
				tp := newTopology(b, 9000)
				tp.segmentOnWire(b)
				if drop > 0 {
					tp.addRuleset(b, tp.a, lossRules(drop, 2))
					tp.addRuleset(b, tp.b, lossRules(drop, 2))
				}
				common := []string{"-m", "4096", "-c", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters)}
				var mbits float64
				var goBacks, spurious, retries uint64
				runs := 0
				for b.Loop() {
					ctx, cancel := context.WithTimeout(b.Context(), 150*time.Second)
					srv, cli := pair(b, ctx, tp, common, nil, nil, 140*time.Second)
					cancel()
					sc, cc := checkRun(b, srv, cli, size, iters)
					mbits += parseRun(b, cli, addrB, addrA).mbits
					goBacks += sc["early_go_backs"] + cc["early_go_backs"]
					spurious += sc["spurious_go_backs"] + cc["spurious_go_backs"]
					retries += sc["completer_retry_err"] + cc["completer_retry_err"]
					runs++
				}
				mbits /= float64(runs)
				b.ReportMetric(mbits, "Mbit/s")
				b.ReportMetric(float64(goBacks)/float64(runs), "early-go-backs/run")
				b.ReportMetric(float64(spurious)/float64(runs), "spurious/run")
				b.ReportMetric(float64(retries)/float64(runs), "go-backs/run")
				if drop == 0 {
					lossless[size] = mbits
				} else if l := lossless[size]; l > 0 {
					b.ReportMetric(mbits/l, "x-lossless")
				}
			})
		}
	}
}
