package verbs

import (
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/goroce/goroce/internal/link/memlink"
)

// TestManyQPs creates 100,000 RC QPs on one device, connects them (RTS),
// and measures what an idle QP costs: 100,000 QPs in one process must fit
// in no more than 16 KiB each.
func TestManyQPs(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 100,000 QPs")
	}
	n := 100_000
	if s := os.Getenv("GOROCE_QPS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	a, b := netip.MustParseAddrPort("198.18.0.1:4791"), netip.MustParseAddrPort("198.18.0.2:4791")
	la, lb := memlink.NewPair(a, b)
	da, _ := openPair(t, Config{Addr: a.Addr(), Link: la, MTU: 9000}, Config{Addr: b.Addr(), Link: lb, MTU: 9000})
	pd, err := da.AllocPD()
	must(t, err)
	cq, err := da.CreateCQ(16, nil)
	must(t, err)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	qps := make([]*QP, 0, n)
	for i := range n {
		qp, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatalf("QP %d: %v", i, err)
		}
		must(t, qp.Modify(&QPAttr{State: QPSInit, PortNum: 1, AccessFlags: AccessRemoteWrite}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
		must(t, qp.Modify(&QPAttr{State: QPSRTR, PathMTU: MTU4096, DestQPN: 0x11 + uint32(i), RQPSN: 1, MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AH: AHAttr{IsGlobal: true, DGID: GIDFromAddr(b.Addr()), SGIDIndex: 1, HopLimit: 64, PortNum: 1}},
			AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer))
		must(t, qp.Modify(&QPAttr{State: QPSRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic))
		qps = append(qps, qp)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapInuse-before.HeapInuse) / float64(n)
	t.Logf("%d QPs in RTS: %.0f bytes of heap each", n, per)
	if per > 16<<10 {
		t.Errorf("an idle QP costs %.0f bytes, want at most 16 KiB", per)
	}
	runtime.KeepAlive(qps)
}
