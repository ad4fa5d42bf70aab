package verbs

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/memlink"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/transport"
)

// recordingLink is a link that notes how many packets each WriteBatch
// call was given.
type recordingLink struct {
	link.Link
	mu     sync.Mutex
	writes []int
}

func (l *recordingLink) WriteBatch(pkts []link.Packet) (int, error) {
	l.mu.Lock()
	l.writes = append(l.writes, len(pkts))
	l.mu.Unlock()
	return l.Link.WriteBatch(pkts)
}

// TestWriteSchedule checks the sizes of a turn's writes (worker.Emit):
// the first after firstWrite packets, so the peer starts on them while
// the rest is built, then each as large as all written before it in the
// turn, at least twice firstWrite, up to link.MaxBatch, and the rest when
// the turn ends. A signaled WR that unsignaled ones follow ends a write
// where at least pushWrite packets are queued (worker.Push).
func TestWriteSchedule(t *testing.T) {
	a, b := netip.MustParseAddrPort("198.18.0.1:4791"), netip.MustParseAddrPort("198.18.0.2:4791")
	la, lb := memlink.NewPair(a, b)
	rec := &recordingLink{Link: la}
	da, db := openPair(t, Config{Addr: a.Addr(), Link: rec, MTU: 9000}, Config{Addr: b.Addr(), Link: lb, MTU: 9000})
	ea, eb := newEndpoint(t, da, 1<<16), newEndpoint(t, db, 1<<16)
	connect(t, ea, eb, MTU1024)
	for _, tc := range []struct {
		wrs      int
		signaled int // which WR (from 1); 0: the last
		want     []int
	}{
		{10, 0, []int{10}},
		{32, 0, []int{32}},
		{100, 0, []int{32, 64, 4}},
		{250, 0, []int{32, 64, 96, 58}},
		// perftest's bandwidth test: 100 WRs posted, the 72nd signaled.
		{100, 72, []int{32, 40, 28}},
		{100, 56, []int{32, 24, 44}},
		{100, 40, []int{32, 64, 4}}, // 8 queued: too few to write alone
	} {
		wrs := make([]SendWR, tc.wrs)
		for i := range wrs {
			wrs[i] = SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SGL: []SGE{ea.mr.SGE(64*i, 64)},
				RemoteAddr: eb.mr.Addr() + uint64(64*i), RKey: eb.mr.RKey()}
		}
		if tc.signaled == 0 {
			tc.signaled = tc.wrs
		}
		wrs[tc.signaled-1].Flags = SendSignaled
		settle(da)
		rec.mu.Lock()
		rec.writes = rec.writes[:0]
		rec.mu.Unlock()
		goBacks := func() uint64 { c := da.Counters(); return c["early_go_backs"] + c["completer_retry_err"] }
		before := goBacks()
		// One post to an idle queue: the turn that sends it runs on this
		// goroutine and writes all of it.
		if _, err := ea.qp.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		wait(t, ea.cq, 1)
		rec.mu.Lock()
		got := slices.Clone(rec.writes)
		rec.mu.Unlock()
		// The WRs after the signaled one are still in flight: their ACK,
		// arriving while the next case posts, would run a turn of its own
		// on the reader's goroutine and split the next schedule.
		acked(t, ea)
		if n := goBacks() - before; n > 0 && len(got) > len(tc.want) {
			// A loaded host held the ACKs up past an early go-back: the
			// writes after the turn's are its resends, not the schedule.
			t.Logf("%d WRITEs: %d go-backs resent in writes of %v", tc.wrs, n, got[len(tc.want):])
			got = got[:len(tc.want)]
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%d WRITEs, the %dth signaled, went out in writes of %v packets, want %v", tc.wrs, tc.signaled, got, tc.want)
		}
	}
}

// acked waits until e's QP has nothing unacknowledged (its transport's
// timers are off) and its device's workers have run what that took.
func acked(t *testing.T, e *endpoint) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		var d monotime.Time
		e.qp.e.Call(func(t *transport.QP) { d = t.Deadline() })
		if d.IsZero() {
			settle(e.dev)
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the QP's packets were never all acknowledged")
		}
	}
}
