package transport

import (
	"bytes"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// writeAll posts one signaled RDMA WRITE of n bytes from a's buffer to b's.
func writeAll(h *harness, n int) {
	for i := range h.a.buf[:n] {
		h.a.buf[i] = byte(i*7 + 3)
	}
	h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, n)},
		RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
}

// checkWritten checks that the WRITE of n bytes completed and landed.
func checkWritten(t *testing.T, h *harness, n int) {
	t.Helper()
	if len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCSuccess {
		t.Fatalf("WCs %+v, want one SUCCESS", h.a.cq.wcs)
	}
	if !bytes.Equal(h.b.buf[:n], h.a.buf[:n]) {
		t.Fatal("the responder's memory differs from what was written")
	}
}

// run delivers and fires timers until the requester has nothing
// outstanding, at most steps timer steps, and returns the time it took.
func (h *harness) run(steps int) time.Duration {
	h.t.Helper()
	start := h.now
	h.deliver()
	for range steps {
		if s, _ := h.a.qp.Outstanding(); s == 0 {
			break
		}
		h.advance()
		h.deliver()
	}
	return time.Duration(h.now - start)
}

// TestNAKWithProgressSpendsNoRetry: a long message through a path that
// loses a packet in every stretch of it recovers by sequence NAKs whose
// implied ACKs move the requester on; none of those go-backs spends a
// retry, so it completes even with retry_cnt 0, where the first retry
// would fail it.
func TestNAKWithProgressSpendsNoRetry(t *testing.T) {
	const n = 64 * 256
	h := newHarness(t, 256, func(pa, _ *Path) { pa.RetryCnt = 0 })
	lost := map[uint32]bool{}
	h.drop = func(toB bool, p *wire.Packet) bool {
		// The first transmission of every tenth PSN after the first.
		d := psn.PSN(p.BTH.PSN()).Diff(h.a.qp.path.SQPSN)
		if toB && d > 0 && d%10 == 0 && !lost[p.BTH.PSN()] {
			lost[p.BTH.PSN()] = true
			return true
		}
		return false
	}
	writeAll(h, n)
	if took := h.run(10); took != 0 {
		t.Errorf("recovery took %v of timers; want none, the NAKs suffice", took)
	}
	checkWritten(t, h, n)
	if len(lost) != 6 {
		t.Errorf("%d packets lost, want 6", len(lost))
	}
}

// TestNAKDuringGoBack: a copy of a sequence NAK that arrives after the
// go-back it caused, with no response in between, starts no other go-back
// (rxe: a NAK during a retry starts none) and spends no retry.
func TestNAKDuringGoBack(t *testing.T) {
	h := newHarness(t, 256, func(pa, _ *Path) { pa.RetryCnt = 1 })
	h.loseFirst(true, wire.OpWriteMiddle)
	writeAll(h, 10*256)
	// Deliver the requests; keep the responder's NAK to deliver it twice.
	h.a.qp.Progress(h)
	h.move(h.a.env.take(), h.b, true)
	h.b.qp.Progress(h)
	back := h.b.env.take()
	if len(back) != 1 {
		t.Fatalf("responder sent %d packets, want one NAK", len(back))
	}
	sent := len(h.sent)
	h.move(back, h.a, false)
	resent := len(h.a.env.out)
	h.move(back, h.a, false)
	if again := len(h.a.env.out) - resent; again != 0 {
		t.Errorf("the NAK's copy made the requester resend %d more packets", again)
	}
	h.deliver()
	checkWritten(t, h, 10*256)
	if got := len(h.sent) - sent; got != 9 {
		t.Errorf("%d packets resent, want 9 (from the lost one on)", got)
	}
}

// TestEarlyGoBack: when the NAK for a lost packet is lost too, the
// requester hears nothing; it goes back after earlyDelay, not after the
// ACK timeout, without spending a retry (retry_cnt 0 would fail it), and
// with the congestion window cut to minCwnd: two packets, then growing
// as the ACKs come.
func TestEarlyGoBack(t *testing.T) {
	h := newHarness(t, 256, func(pa, _ *Path) { pa.RetryCnt = 0 })
	var lostData, lostNAK bool
	var perRound []int
	h.drop = func(toB bool, p *wire.Packet) bool {
		switch {
		case toB && !lostData && p.BTH.Opcode().Op() == wire.OpWriteMiddle:
			lostData = true
			return true
		case !toB && !lostNAK && p.AETH != nil && p.AETH.Type() == wire.AckTypeNAK:
			lostNAK = true
			return true
		}
		return false
	}
	const n = 40 * 256
	writeAll(h, n)
	h.deliver()
	if d := time.Duration(h.a.qp.Deadline() - h.now); d != earlyDelay(14, 0) {
		t.Fatalf("next timer in %v, want the early go-back's %v", d, earlyDelay(14, 0))
	}
	if step := h.advance(); step != 67108864*time.Nanosecond/16 {
		t.Fatalf("early go-back after %v, want 4.194304ms", step)
	}
	// Round by round: what the requester sends, then the responder's answer.
	for range 10 {
		h.a.qp.Progress(h)
		out := h.a.env.take()
		if len(out) == 0 {
			break
		}
		perRound = append(perRound, len(out))
		h.move(out, h.b, true)
		h.b.qp.Progress(h)
		h.move(h.b.env.take(), h.a, false)
	}
	h.deliver()
	checkWritten(t, h, n)
	// cwnd 1 allows two PSNs in flight; each ACK grows it by what it
	// acknowledges (slow start up to ssthresh, half the 39 PSNs that were
	// in flight), then by one per window.
	want := []int{2, 4}
	if len(perRound) < 3 || perRound[0] != want[0] || perRound[1] != want[1] || perRound[2] <= perRound[1] {
		t.Errorf("packets per round after the early go-back %v, want %v, then more", perRound, want)
	}
	if h.a.qp.req.cc.cwnd != 0 && h.a.qp.window() <= 4 {
		t.Errorf("window %d after recovery, want it grown back", h.a.qp.window())
	}
}

// TestCongestion checks the window's rules on their own.
func TestCongestion(t *testing.T) {
	const win = 512
	var c congestion
	if c.limit(win) != win {
		t.Fatalf("limit %d before any silence, want the send window", c.limit(win))
	}
	c.silent(psn.New(1000), minCwnd+1, win)
	if c.limit(win) != win || c.canUndo {
		t.Fatalf("a silence with %d PSNs in flight cut the window to %d", minCwnd+1, c.limit(win))
	}
	c.silent(psn.New(1000), 300, win)
	if c.limit(win) != minCwnd || c.ssthresh != 150 {
		t.Fatalf("after a silence with 300 in flight: cwnd %d ssthresh %d, want %d and 150", c.limit(win), c.ssthresh, minCwnd)
	}
	// A second silence before the first's PSNs are acknowledged keeps
	// ssthresh.
	c.silent(psn.New(1000), 2, win)
	if c.ssthresh != 150 {
		t.Errorf("ssthresh %d after a silence while recovering, want 150", c.ssthresh)
	}
	c.acked(100, psn.New(900), win, false) // slow start: +100
	if c.cwnd != 101 {
		t.Errorf("cwnd %d after 100 PSNs in slow start, want 101", c.cwnd)
	}
	c.acked(60, psn.New(1000), win, false) // to 161, past ssthresh
	c.acked(161, psn.New(1200), win, false)
	if c.cwnd != 162 || c.recovering {
		t.Errorf("cwnd %d recovering %v after a window in congestion avoidance, want 162 and false", c.cwnd, c.recovering)
	}
	before := c.window
	c.silent(psn.New(3000), 162, win)
	if c.ssthresh != 81 {
		t.Errorf("ssthresh %d after a new silence with 162 in flight, want 81", c.ssthresh)
	}
	// A second silence, then a response that shows the first
	// transmission arrived: the window before the first comes back.
	c.silent(psn.New(3000), 2, win)
	if !c.acked(10, psn.New(2900), win, true) || c.cwnd != before.cwnd || c.ssthresh != before.ssthresh {
		t.Errorf("window %+v after a spurious silence, want %+v restored", c.window, before)
	}
	c.silent(psn.New(3000), 162, win)
	c.acked(1, psn.New(2911), win, false)
	if c.acked(10, psn.New(2921), win, true) || c.cwnd != minCwnd+1+10 {
		t.Errorf("cwnd %d: a response after the first undid the silence's cut; only the first may", c.cwnd)
	}
	for range 4000 {
		c.acked(64, psn.New(5000), win, false)
	}
	if c != (congestion{}) || c.limit(win) != win {
		t.Errorf("after many ACKs %+v, want the send window back and nothing tracked", c)
	}
}

// TestSpuriousGoBack: ACKs that wait past the early go-back's delay (a
// requester whose process was not run, a slow peer) make it resend; when
// they arrive they acknowledge PSNs the resend had not reached, which
// shows the first transmission arrived, and the window cut is undone.
func TestSpuriousGoBack(t *testing.T) {
	h := newHarness(t, 256, nil)
	st := stats.New()
	h.a.qp.cfg.Stats = st
	const n = 40 * 256
	writeAll(h, n)
	h.a.qp.Progress(h)
	h.move(h.a.env.take(), h.b, true)
	h.b.qp.Progress(h)
	late := h.b.env.take() // the ACKs, held back
	if len(late) == 0 {
		t.Fatal("the responder sent no ACK")
	}
	if step := h.advance(); step != earlyDelay(14, 0) {
		t.Fatalf("first timer after %v, want the early go-back's %v", step, earlyDelay(14, 0))
	}
	h.a.qp.Progress(h)
	resent := h.a.env.take()
	if len(resent) != minCwnd+1 {
		t.Fatalf("%d packets resent after the early go-back, want %d", len(resent), minCwnd+1)
	}
	h.move(late, h.a, false)
	if h.a.qp.window() != h.a.qp.sendWindow() {
		t.Errorf("window %d after the late ACKs, want the send window %d back", h.a.qp.window(), h.a.qp.sendWindow())
	}
	h.move(resent, h.b, true) // duplicates, acknowledged again
	h.deliver()
	checkWritten(t, h, n)
	if e, s := st.Get(stats.EarlyGoBacks), st.Get(stats.SpuriousGoBacks); e != 1 || s != 1 {
		t.Errorf("early_go_backs %d, spurious_go_backs %d; want 1 each", e, s)
	}
}
