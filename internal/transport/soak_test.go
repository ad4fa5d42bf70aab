package transport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// TestLossySoak drives two QPs through random mixed traffic (WRITE,
// READ, FETCH_ADD, SEND) over a lossy, duplicating, stalling "network"
// under the fake clock, for many seeds: every WR
// must complete successfully, exactly once and in order, with the data
// right, and the QPs must end idle. A failure names its seed.
func TestLossySoak(t *testing.T) {
	for _, c := range []struct{ loss, dup, reorder, stall float64 }{
		{0.01, 0, 0, 0}, {0.05, 0, 0, 0}, {0.10, 0, 0, 0}, {0, 0.05, 0, 0}, {0, 0, 0.10, 0}, {0.03, 0.03, 0.05, 0},
		{0, 0, 0, 0.3}, {0.05, 0, 0, 0.3}, {0.03, 0.03, 0.05, 0.3},
	} {
		for seed := range uint64(30) {
			if err := lossySoak(t, seed, c.loss, c.dup, c.reorder, c.stall); err != nil {
				t.Fatalf("loss %v dup %v reorder %v stall %v seed %d: %v", c.loss, c.dup, c.reorder, c.stall, seed, err)
			}
		}
	}
}

// lossySoak runs random traffic where each packet is lost with
// probability loss, delivered twice with probability dup, and held back
// behind the rest of its round with probability reorder. With
// probability stall a step of the requester's is a stall: what it sends
// arrives only after its next timer (an early go-back, mostly) fired, as
// on a busy host, so that responses to first transmissions overtake the
// resends the congestion window holds back.
func lossySoak(t *testing.T, seed uint64, loss, dup, reorder, stall float64) error {
	rng := rand.New(rand.NewPCG(seed, 99))
	h := newHarness(t, 256, func(pa, pb *Path) { pa.RetryCnt, pb.RetryCnt = 7, 7; pa.SplitWrites = true })
	type held struct {
		toB bool
		p   wire.Packet
	}
	var later []held
	h.a.qp.cfg.Budget = NewBudget(1024, func(*QP) {})
	h.a.qp.cfg.Window = 512
	var windowErr error
	h.drop = func(toB bool, p *wire.Packet) bool {
		// The send window holds under retransmission too: no request
		// leaves more than MaxUnackedPSNs ahead of the oldest
		// unacknowledged PSN (rxe: req.psn ≤ comp.psn + 128).
		if d := psn.PSN(p.BTH.PSN()).Diff(h.a.qp.comp.psn); toB && d > MaxUnackedPSNs && windowErr == nil {
			windowErr = fmt.Errorf("request PSN %#x is %d ahead of comp.psn %#x", p.BTH.PSN(), d, uint32(h.a.qp.comp.psn))
		}
		switch x := rng.Float64(); {
		case x < loss:
			return true
		case x < loss+dup:
			later = append(later, held{toB, *p})
		case x < loss+dup+reorder:
			later = append(later, held{toB, *p})
			return true
		}
		return false
	}
	flushLater := func() {
		for len(later) > 0 {
			l := later[0]
			later = later[1:]
			if l.toB {
				h.b.qp.Receive(&l.p, h)
			} else {
				h.a.qp.Receive(&l.p, h)
			}
		}
	}
	const region = 64 << 10
	shadow := make([]byte, region)
	counter := uint64(0)
	nextWRID, done := uint64(0), 0
	type check struct {
		wrid uint64
		off  int
		want []byte
		fadd bool
		old  uint64
	}
	var checks, sendChecks []check
	for round := 0; round < 60; round++ {
		n := 1 + rng.IntN(6)
		var wrs []SendWR
		// A retried READ reads memory again (IBA 9.7.5.1.6, as rxe does), so
		// a WRITE posted after it may show through. Each round therefore
		// reads the half written in earlier rounds and writes the other.
		writeHalf := (round % 2) * region / 2
		readHalf := region/2 - writeHalf
		for j := range n {
			size := rng.IntN(3000)
			off := writeHalf + rng.IntN(region/2-size)
			slot := 128<<10 + j*4096
			switch rng.IntN(5) {
			case 4: // SEND
				for k := range size {
					h.a.buf[slot+k] = byte(rng.Uint32())
				}
				rs := 768<<10 + int(nextWRID%64)*4096
				h.postRecv(h.b, RecvWR{WRID: nextWRID, SGL: []memory.SGE{h.b.sge(rs, 4096)}})
				sendChecks = append(sendChecks, check{wrid: nextWRID, off: rs, want: append([]byte(nil), h.a.buf[slot:slot+size]...)})
				wrs = append(wrs, SendWR{WRID: nextWRID, Opcode: WRSend, SGL: []memory.SGE{h.a.sge(slot, size)}})
			case 0, 1: // WRITE
				for k := range size {
					h.a.buf[slot+k] = byte(rng.Uint32())
				}
				copy(shadow[off:], h.a.buf[slot:slot+size])
				wrs = append(wrs, SendWR{WRID: nextWRID, Opcode: WRRDMAWrite, Flags: SendInline * 0, SGL: []memory.SGE{h.a.sge(slot, size)},
					RemoteAddr: h.b.mr.Addr() + uint64(off), RKey: h.b.mr.RKey()})
			case 2: // READ
				off = readHalf + rng.IntN(region/2-size)
				dst := 256<<10 + j*4096
				checks = append(checks, check{wrid: nextWRID, off: dst, want: append([]byte(nil), shadow[off:off+size]...)})
				wrs = append(wrs, SendWR{WRID: nextWRID, Opcode: WRRDMARead, SGL: []memory.SGE{h.a.sge(dst, size)},
					RemoteAddr: h.b.mr.Addr() + uint64(off), RKey: h.b.mr.RKey()})
			default: // FETCH_ADD
				dst := 512<<10 + j*8
				checks = append(checks, check{wrid: nextWRID, off: dst, fadd: true, old: counter})
				counter++
				wrs = append(wrs, SendWR{WRID: nextWRID, Opcode: WRAtomicFetchAndAdd, SGL: []memory.SGE{h.a.sge(dst, 8)},
					RemoteAddr: h.b.mr.Addr() + region, RKey: h.b.mr.RKey(), CompareAdd: 1})
			}
			wrs[len(wrs)-1].Flags |= SendSignaled
			nextWRID++
		}
		// WRITE sources must not change before they are sent: give each
		// round its own slots (above) and wait for the round to finish.
		h.post(h.a, wrs...)
		for steps := 0; done < int(nextWRID); steps++ {
			if rng.Float64() < stall {
				h.a.qp.Progress(h)
				held := h.a.env.take()
				if d := h.a.qp.Deadline(); d != 0 {
					h.now = d
					h.a.qp.Timeout(h)
				}
				h.move(held, h.b, true)
			}
			h.deliver()
			flushLater()
			h.deliver()
			if len(h.a.cq.wcs) > done {
				for _, wc := range h.a.cq.wcs[done:] {
					if wc.Status != WCSuccess {
						return fmt.Errorf("round %d: WR %d: %v", round, wc.WRID, wc.Status)
					}
					if wc.WRID != uint64(done) {
						return fmt.Errorf("round %d: completion for WR %d, expected %d", round, wc.WRID, done)
					}
					done++
				}
				continue
			}
			if h.a.qp.Deadline() == 0 && h.b.qp.Deadline() == 0 {
				s, r := h.a.qp.Outstanding()
				q := h.a.qp
				head, tail := q.cfg.SQ.bounds()
				for i := head; i != tail; i++ {
					w := q.cfg.SQ.slot(i)
					t.Logf("wqe %d op %v first %#x npkts %d started %v sent %v acked %v placed %d", i, w.wr.Opcode, uint32(w.firstPSN), w.npkts, w.started, w.sent, w.acked, w.placed)
				}
				t.Logf("req.wqe %d offset %d rdAtomicOut %d comp.wqe %d maxPSN %#x rnr %v", q.req.wqe, q.req.offset, q.req.rdAtomicOut, q.comp.wqe, uint32(q.req.maxPSN), q.req.rnrUntil)
				return fmt.Errorf("round %d: stuck with no timer: %d WQEs outstanding (%d responses), comp.psn %#x req.psn %#x",
					round, s, r, uint32(h.a.qp.comp.psn), uint32(h.a.qp.req.psn))
			}
			if steps > 10000 {
				return fmt.Errorf("round %d: no progress", round)
			}
			h.advance()
		}
		for _, c := range checks {
			if c.fadd {
				if got := binary.NativeEndian.Uint64(h.a.buf[c.off:]); got != c.old {
					return fmt.Errorf("FETCH_ADD WR %d returned %d, want %d", c.wrid, got, c.old)
				}
			} else if !bytes.Equal(h.a.buf[c.off:c.off+len(c.want)], c.want) {
				return fmt.Errorf("READ WR %d returned other bytes", c.wrid)
			}
		}
		checks = checks[:0]
		for _, c := range sendChecks {
			if !bytes.Equal(h.b.buf[c.off:c.off+len(c.want)], c.want) {
				return fmt.Errorf("SEND WR %d: received other bytes", c.wrid)
			}
		}
		sendChecks = sendChecks[:0]
	}
	if windowErr != nil {
		return windowErr
	}
	if !bytes.Equal(h.b.buf[:region], shadow) {
		return fmt.Errorf("remote memory differs from what was written")
	}
	if got := binary.NativeEndian.Uint64(h.b.buf[region:]); got != counter {
		return fmt.Errorf("counter %d after %d adds", got, counter)
	}
	return nil
}
