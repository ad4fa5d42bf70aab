package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/wire"
)

// TestAckReqCadence: rxe sets AckReq on the last packet of a message and
// on the packet after more than 64 without it.
func TestAckReqCadence(t *testing.T) {
	h := newHarness(t, 256, nil)
	h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, 200*256)},
		RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
	h.deliver()
	var acked []int
	for i, p := range h.sent {
		if p.BTH.AckReq() {
			acked = append(acked, i+1)
		}
	}
	if want := []int{66, 132, 198, 200}; !equalInts(acked, want) {
		t.Errorf("AckReq on packets %v, want %v", acked, want)
	}
	if len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCSuccess {
		t.Errorf("WCs %+v", h.a.cq.wcs)
	}
	// The PSNs run on across the 2^24 wrap (SQ PSN 0xfffff0).
	for i, p := range h.sent {
		if got, want := p.BTH.PSN(), uint32(0xfffff0+i)&0xffffff; got != want {
			t.Fatalf("packet %d PSN %#x, want %#x", i, got, want)
		}
	}
}

// TestAckReqInBursts: a SEND or WRITE that another follows in the same
// run of sends does not ask for an ACK; the last of the run, a signaled
// one, one before a READ or a fenced WRITE, the cadence and every resend
// still do.
func TestAckReqInBursts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   int // bytes per WRITE (MTU 256)
		n      int // WRITEs, the last signaled
		edit   func(i int, wr *SendWR)
		want   []int // packets (from 1) with AckReq
		budget bool  // the device's PSN budget, with PSNs to spare
	}{
		{"burst", 8, 60, nil, []int{60}, false},
		{"cadence", 512, 40, nil, []int{66, 80}, false},
		{"signaled", 8, 60, func(i int, wr *SendWR) {
			if i == 19 {
				wr.Flags |= SendSignaled
			}
		}, []int{20, 60}, false},
		{"before a READ", 8, 60, func(i int, wr *SendWR) {
			if i == 29 {
				wr.Opcode = WRRDMARead
			}
		}, []int{29, 30, 60}, false},
		{"before a fence", 8, 60, func(i int, wr *SendWR) {
			if i == 29 {
				wr.Flags |= SendFence
			}
		}, []int{29, 60}, false},
		{"SENDs", 8, 60, func(_ int, wr *SendWR) { wr.Opcode = WRSend }, []int{60}, false},
		// Each one-packet message takes its own PSN from the budget.
		{"budget", 8, 60, nil, []int{60}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 256, nil)
			if tc.budget {
				h.a.qp.cfg.Window, h.a.qp.cfg.Budget = 512, NewBudget(1024, func(*QP) {})
			}
			recvs := 0
			for i := range tc.n {
				wr := SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SGL: []memory.SGE{h.a.sge(0, tc.size)},
					RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()}
				if i == tc.n-1 {
					wr.Flags |= SendSignaled
				}
				if tc.edit != nil {
					tc.edit(i, &wr)
				}
				if wr.Opcode == WRSend {
					h.postRecv(h.b, RecvWR{WRID: uint64(i), SGL: []memory.SGE{h.b.sge(0, tc.size)}})
					recvs++
				}
				h.post(h.a, wr)
			}
			h.deliver()
			var asked []int
			for i, p := range h.sent {
				if p.BTH.AckReq() {
					asked = append(asked, i+1)
				}
			}
			if !equalInts(asked, tc.want) {
				t.Errorf("AckReq on packets %v, want %v", asked, tc.want)
			}
			if n := len(h.b.cq.wcs); n != recvs {
				t.Errorf("%d receive WCs, want %d", n, recvs)
			}
			if last := h.a.cq.wcs[len(h.a.cq.wcs)-1]; last.WRID != uint64(tc.n-1) || last.Status != WCSuccess {
				t.Errorf("last WC %+v, want WR %d done", last, tc.n-1)
			}
			if sends, _ := h.a.qp.Outstanding(); sends != 0 {
				t.Errorf("%d send WQEs outstanding after the last ACK", sends)
			}
		})
	}
}

// TestPush: the requester asks the device to write what it has emitted
// (Env.Push) after the last packet of a signaled WR that other WQEs of the
// run follow, none of them signaled: the completion the application waits
// for next. Not where a later WR of the run is signaled, nor after the
// run's last WR.
func TestPush(t *testing.T) {
	for _, tc := range []struct {
		name     string
		size     int   // bytes per WRITE (MTU 256)
		n        int   // WRITEs posted in one run
		signaled []int // which (from 1)
		want     []int // packets emitted (from 1) at each Push
	}{
		{"perftest", 8, 60, []int{40}, []int{40}},
		{"two signaled", 8, 60, []int{20, 40}, []int{40}},
		{"all signaled", 8, 20, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, nil},
		{"the last signaled", 8, 60, []int{60}, nil},
		{"multi-packet", 512, 10, []int{5}, []int{10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 256, nil)
			for i := range tc.n {
				wr := SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SGL: []memory.SGE{h.a.sge(0, tc.size)},
					RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()}
				if slices.Contains(tc.signaled, i+1) {
					wr.Flags |= SendSignaled
				}
				h.post(h.a, wr)
			}
			h.deliver()
			if !equalInts(h.a.env.pushed, tc.want) {
				t.Errorf("Push after packets %v, want %v", h.a.env.pushed, tc.want)
			}
			if n := len(h.a.cq.wcs); n != len(tc.signaled) {
				t.Errorf("%d WCs, want %d", n, len(tc.signaled))
			}
		})
	}
}

// TestAckReqOnResend: a burst lost whole is resent after the ACK timeout
// with AckReq on the last packet of every message, as rxe asks.
func TestAckReqOnResend(t *testing.T) {
	h := newHarness(t, 256, nil)
	first := true
	h.drop = func(toB bool, _ *wire.Packet) bool { return toB && first }
	for i := range 10 {
		wr := SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SGL: []memory.SGE{h.a.sge(0, 8)},
			RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()}
		if i == 9 {
			wr.Flags |= SendSignaled
		}
		h.post(h.a, wr)
	}
	h.deliver()
	first = false
	h.advance()
	h.deliver()
	if len(h.sent) != 20 {
		t.Fatalf("%d packets sent, want 10 and 10 resent", len(h.sent))
	}
	for i, p := range h.sent {
		if want := i == 9 || i >= 10; p.BTH.AckReq() != want {
			t.Errorf("packet %d: AckReq %v, want %v", i+1, p.BTH.AckReq(), want)
		}
	}
	if len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCSuccess {
		t.Errorf("WCs %+v", h.a.cq.wcs)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAckCoalescing: requests that arrive together are answered by one ACK
// for the last of them, carrying the MSN of all.
func TestAckCoalescing(t *testing.T) {
	h := newHarness(t, 1024, nil)
	for i := range 3 {
		h.post(h.a, SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, 8)},
			RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
	}
	h.deliver()
	var acks []wire.Packet
	for _, p := range h.back {
		if p.BTH.Opcode().Op() == wire.OpAcknowledge {
			acks = append(acks, p)
		}
	}
	if len(acks) != 1 || acks[0].BTH.PSN() != h.sent[2].BTH.PSN() || acks[0].AETH.MSN() != 3 {
		t.Fatalf("%d ACKs (first: PSN %#x MSN %d), want one for PSN %#x with MSN 3", len(acks),
			acks[0].BTH.PSN(), acks[0].AETH.MSN(), h.sent[2].BTH.PSN())
	}
	if len(h.a.cq.wcs) != 3 {
		t.Errorf("%d completions, want 3 (the coalesced ACK covers all)", len(h.a.cq.wcs))
	}
}

// TestRetryExhaustion: with every packet lost, the requester resends at
// each ACK timeout (4.096 µs × 2^timeout), retry_cnt times, then fails
// with RETRY_EXC_ERR and moves to ERR, flushing the rest: a dead peer is
// found (retry_cnt+1) ACK timeouts after the last progress. Between the
// timeouts it makes its early go-backs (earlyDelay), which spend no
// retry. No real time passes: the test moves the clock.
func TestRetryExhaustion(t *testing.T) {
	const timeout = 4194304 * time.Nanosecond // 4.096 µs × 2^10
	h := newHarness(t, 1024, func(pa, _ *Path) { pa.RetryCnt, pa.Timeout = 3, 10 })
	h.drop = func(toB bool, _ *wire.Packet) bool { return toB }
	h.post(h.a,
		SendWR{WRID: 1, Opcode: WRRDMAWrite, SGL: []memory.SGE{h.a.sge(0, 8)}, RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()},
		SendWR{WRID: 2, Opcode: WRSend, SGL: []memory.SGE{h.a.sge(0, 8)}})
	h.deliver()
	start := h.now
	// Within each ACK timeout: early go-backs after 0.5, 1 and 2 ms (the
	// next, 4 ms, would not come before half the timeout is over).
	wantSteps := []time.Duration{500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond, timeout - 3500*time.Microsecond}
	for retry := 0; retry <= 3; retry++ {
		for i, want := range wantSteps {
			if step := h.advance(); step != want {
				t.Fatalf("timeout %d, step %d: after %v, want %v", retry, i, step, want)
			}
			h.deliver()
			resends := retry*len(wantSteps) + i + 1
			if retry == 3 && i == len(wantSteps)-1 {
				resends-- // the fourth timeout fails the WR instead
			}
			if n, want := len(h.sent), 2*(1+resends); n != want {
				t.Fatalf("timeout %d, step %d: %d packets sent, want %d", retry, i, n, want)
			}
		}
	}
	if got, want := time.Duration(h.now-start), 4*timeout; got != want {
		t.Errorf("failed %v after the first send, want %v", got, want)
	}
	wcs := h.a.cq.wcs
	if len(wcs) != 2 || wcs[0].WRID != 1 || wcs[0].Status != WCRetryExcErr || wcs[1].Status != WCWRFlushErr {
		t.Fatalf("WCs %+v, want RETRY_EXC_ERR then WR_FLUSH_ERR", wcs)
	}
	if h.a.qp.State() != qpstate.Err || len(h.a.env.fatal) != 1 {
		t.Errorf("state %v, fatal %v", h.a.qp.State(), h.a.env.fatal)
	}
	if h.a.qp.Deadline() != 0 {
		t.Error("a timer is still armed after the error")
	}
}

// TestRNRWait: without a receive WQE the responder sends an RNR NAK with
// its min_rnr_timer; the requester waits exactly that long, then resends.
func TestRNRWait(t *testing.T) {
	h := newHarness(t, 1024, func(_, pb *Path) { pb.MinRNRTimer = 14 }) // 1.28 ms
	h.post(h.a, SendWR{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, 100)}})
	h.deliver()
	if len(h.back) != 1 || h.back[0].AETH.Type() != wire.AckTypeRNRNAK || h.back[0].AETH.Value() != 14 {
		t.Fatalf("responder sent %d packets, want one RNR NAK with timer 14", len(h.back))
	}
	h.postRecv(h.b, RecvWR{WRID: 9, SGL: []memory.SGE{h.b.sge(0, 128)}})
	h.deliver()
	if len(h.sent) != 1 {
		t.Fatalf("resent before the RNR timer expired")
	}
	if step := h.advance(); step != 1280*time.Microsecond {
		t.Fatalf("RNR wait %v, want 1.28ms", step)
	}
	h.deliver()
	if len(h.sent) != 2 || len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCSuccess || len(h.b.cq.wcs) != 1 {
		t.Fatalf("after the wait: %d sent, WCs %+v / %+v", len(h.sent), h.a.cq.wcs, h.b.cq.wcs)
	}
}

// TestSequenceNAK: a lost packet in the middle of a message gets exactly
// one PSN sequence error NAK however many packets follow it; the requester
// goes back to the lost PSN and the data arrives complete.
func TestSequenceNAK(t *testing.T) {
	h := newHarness(t, 256, nil)
	h.loseFirst(true, wire.OpWriteMiddle)
	for i := range h.a.buf[:10*256] {
		h.a.buf[i] = byte(i * 7)
	}
	h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, 10*256)},
		RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
	h.deliver()
	naks := 0
	for _, p := range h.back {
		if p.AETH != nil && p.AETH.Type() == wire.AckTypeNAK {
			naks++
			if wire.NAKCode(p.AETH.Value()) != wire.NAKPSNSeqError || p.BTH.PSN() != h.sent[1].BTH.PSN() {
				t.Errorf("NAK %v for PSN %#x, want PSN_SEQ_ERR for %#x", wire.NAKCode(p.AETH.Value()), p.BTH.PSN(), h.sent[1].BTH.PSN())
			}
		}
	}
	if naks != 1 {
		t.Errorf("%d NAKs, want 1", naks)
	}
	if !bytes.Equal(h.b.buf[:10*256], h.a.buf[:10*256]) || len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCSuccess {
		t.Errorf("after go-back-N: data equal %v, WCs %+v", bytes.Equal(h.b.buf[:10*256], h.a.buf[:10*256]), h.a.cq.wcs)
	}
}

// TestDuplicateAtomic: an atomic whose ACK was lost is sent again and
// answered from the responder's record: it executes once.
func TestDuplicateAtomic(t *testing.T) {
	h := newHarness(t, 1024, nil)
	binary.NativeEndian.PutUint64(h.b.buf, 10)
	h.loseFirst(false, wire.OpAtomicAcknowledge)
	h.post(h.a, SendWR{WRID: 1, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, 8)},
		RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey(), CompareAdd: 5})
	h.deliver()
	h.advance() // the ACK timeout: resend the FETCH_ADD
	h.deliver()
	if got := binary.NativeEndian.Uint64(h.b.buf); got != 15 {
		t.Errorf("target %d after a duplicate FETCH_ADD, want 15 (executed once)", got)
	}
	if got := binary.NativeEndian.Uint64(h.a.buf); got != 10 || len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCSuccess {
		t.Errorf("returned %d, WCs %+v; want 10 and one success", got, h.a.cq.wcs)
	}
}

// TestReadCredit: no more than max_rd_atomic READs are outstanding.
func TestReadCredit(t *testing.T) {
	h := newHarness(t, 1024, func(pa, _ *Path) { pa.MaxRdAtomic = 2 })
	for i := range 5 {
		h.post(h.a, SendWR{WRID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(i*64, 64)},
			RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
	}
	h.a.qp.Progress(h)
	if n := len(h.a.env.out); n != 2 {
		t.Fatalf("%d READ requests before any response, want 2", n)
	}
	h.deliver()
	if len(h.a.cq.wcs) != 5 {
		t.Errorf("%d READs completed, want 5", len(h.a.cq.wcs))
	}
}

// TestSendWindow: without ACKs, a requester sends MaxUnackedPSNs+1
// packets (PSNs up to MaxUnackedPSNs ahead of the oldest unacknowledged),
// or Config.Window's count when it is set.
func TestSendWindow(t *testing.T) {
	for _, tc := range []struct {
		window int // 0: unset
		want   int
	}{{0, MaxUnackedPSNs + 1}, {512, 513}, {-1, MaxUnackedPSNs + 1}} {
		h := newHarness(t, 256, nil)
		h.a.qp.cfg.Window = tc.window
		h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWrite, SGL: []memory.SGE{h.a.sge(0, 1000*256)},
			RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
		h.a.qp.Progress(h)
		if got := len(h.a.env.take()); got != tc.want {
			t.Errorf("window %d: %d packets sent without an ACK, want %d", tc.window, got, tc.want)
		}
	}
}

// TestSmallWindowAsksForAcks: with a window below the AckReq cadence, the
// packet that fills the window asks for an ACK, so a long message flows
// without waiting for the retry timer; with rxe's window the packets carry
// rxe's AckReq bits.
func TestSmallWindowAsksForAcks(t *testing.T) {
	h := newHarness(t, 256, nil)
	h.a.qp.cfg.Window = 32
	h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, 1000*256)},
		RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
	h.deliver() // no clock moves: a stall would leave the WRITE incomplete
	if len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCSuccess {
		t.Fatalf("WCs %+v: the WRITE stalled with a 32-PSN window", h.a.cq.wcs)
	}
	if len(h.sent) != 1000 {
		t.Errorf("%d packets sent, want 1000 (no retransmission)", len(h.sent))
	}
}

// TestReadWindow: however large the send window, READ requests stop while
// more than MaxUnackedPSNs response PSNs are outstanding.
func TestReadWindow(t *testing.T) {
	h := newHarness(t, 256, func(pa, pb *Path) { pa.MaxRdAtomic, pb.MaxDestRdAtomic = 16, 16 })
	h.a.qp.cfg.Window = 512
	for i := range 8 {
		h.post(h.a, SendWR{WRID: uint64(i), Opcode: WRRDMARead, SGL: []memory.SGE{h.a.sge(i*64*256, 64*256)},
			RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
	}
	h.a.qp.Progress(h)
	// Each READ takes 64 PSNs: PSNs 0..127 hold two, and a third would
	// start at 128 (the window allows up to 128 ahead), taking the
	// outstanding responses to 192.
	if got := len(h.a.env.take()); got != 3 {
		t.Errorf("%d READ requests sent at once with a 512-PSN window, want 3", got)
	}
}

// TestQueueDepths: send and receive queues hold exactly the depth asked
// for, whether or not it is a power of two, and keep their WQEs in order
// as the rings wrap.
func TestQueueDepths(t *testing.T) {
	for _, depth := range []int{1, 3, 5, 64, 100} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			h := newHarness(t, 1024, nil)
			for _, s := range []*side{h.a, h.b} {
				s.qp = NewQP(Config{QPN: s.qp.cfg.QPN, PD: testPD, Mem: s.mem, SendCQ: s.cq, RecvCQ: s.cq,
					SQ: NewSendQueue(depth), RQ: NewRecvQueue(depth), MaxSGE: 1}, s.env)
				if d := s.qp.cfg.SQ.Depth(); d != depth {
					t.Fatalf("send queue depth %d, want %d", d, depth)
				}
				if d := s.qp.cfg.RQ.Depth(); d != depth {
					t.Fatalf("receive queue depth %d, want %d", d, depth)
				}
			}
			connect(h.a.qp, h.b.qp, 1024, nil)
			for round := range 3 {
				sends := make([]SendWR, depth+1)
				recvs := make([]RecvWR, depth+1)
				for i := range sends {
					id := uint64(round*1000 + i)
					off := (round*(depth+1) + i) * 8
					binary.LittleEndian.PutUint64(h.a.buf[off:], id)
					sends[i] = SendWR{WRID: id, Opcode: WRSend, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(off, 8)}}
					recvs[i] = RecvWR{WRID: id, SGL: []memory.SGE{h.b.sge(off, 8)}}
				}
				if n, err := h.a.qp.PostSend(sends, qpstate.RTS); n != depth || !errors.Is(err, ErrQueueFull) {
					t.Fatalf("round %d: PostSend of %d WRs = %d, %v; want %d, ErrQueueFull", round, depth+1, n, err, depth)
				}
				if n, err := h.b.qp.cfg.RQ.Post(recvs); n != depth || !errors.Is(err, ErrQueueFull) {
					t.Fatalf("round %d: Post of %d receive WRs = %d, %v; want %d, ErrQueueFull", round, depth+1, n, err, depth)
				}
				h.deliver()
				for _, s := range []*side{h.a, h.b} {
					if len(s.cq.wcs) != depth {
						t.Fatalf("round %d: QP %#x: %d completions, want %d", round, s.qp.cfg.QPN, len(s.cq.wcs), depth)
					}
					for i, wc := range s.cq.wcs {
						if wc.Status != WCSuccess || wc.WRID != sends[i].WRID {
							t.Fatalf("round %d: QP %#x: completion %d is %+v, want WR %d", round, s.qp.cfg.QPN, i, wc, sends[i].WRID)
						}
					}
					s.cq.wcs = nil
				}
				for i := range depth {
					off := (round*(depth+1) + i) * 8
					if got := binary.LittleEndian.Uint64(h.b.buf[off:]); got != sends[i].WRID {
						t.Fatalf("round %d: SEND %d placed %d", round, i, got)
					}
				}
			}
		})
	}
}

// TestClockOnlyForTimers: the transport reads its Clock only where it
// arms or checks a timer. A ping-pong message's WRITE arms the retransmit
// timer as it leaves; its placement, the ACK the responder sends for it,
// and that ACK's retiring the WQE (which stops the timer) read nothing,
// so a device whose Clock reads the time lazily reads it once a message
// on those steps instead of once a step.
func TestClockOnlyForTimers(t *testing.T) {
	h := newHarness(t, 1024, nil)
	h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, 2)},
		RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
	h.a.qp.Progress(h)
	if h.nows != 1 || h.a.qp.Deadline() == 0 {
		t.Fatalf("sending the WRITE read the clock %d times, timer armed %v; want 1, true", h.nows, h.a.qp.Deadline() != 0)
	}
	h.nows = 0
	h.move(h.a.env.take(), h.b, true) // placed
	h.b.qp.Progress(h)                // its ACK
	h.move(h.b.env.take(), h.a, false)
	h.a.qp.Progress(h)
	if h.nows != 0 {
		t.Errorf("placing the WRITE, acknowledging it and retiring its WQE read the clock %d times, want 0", h.nows)
	}
	if len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCSuccess || h.a.qp.Deadline() != 0 {
		t.Errorf("completions %+v, deadline %v; want one success and no timer", h.a.cq.wcs, h.a.qp.Deadline())
	}
}
