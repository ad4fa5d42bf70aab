package transport

import (
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/prefetch"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// requester turns send WQEs into request packets (IBA 9.7.1-9.7.4):
//
//	for each WQE, oldest first:
//	    wait  while the fence, the read/atomic credit or the send window says so
//	    send  its packets, MTU by MTU: FIRST, MIDDLE…, LAST (or ONLY),
//	          one PSN each; an RDMA READ request takes one PSN per response packet
//
// The completer rewinds it (go-back-N) after a timeout or a NAK.
type requester struct {
	psn         psn.PSN       // PSN of the next packet
	wqe         uint64        // index of the WQE being sent
	offset      uint64        // bytes of that WQE already sent
	noackPkts   int           // packets sent since the last one with AckReq
	rdAtomicOut int           // RDMA READs and atomics sent and not completed
	maxPSN      psn.PSN       // one past the highest PSN ever sent
	held        int           // PSNs taken from Config.Budget: those in flight and some spare
	rnrUntil    monotime.Time // the RNR timer, on the Clock; zero when not waiting
	cc          congestion    // the window's answer to loss
	src         reuse         // what Config.Placement keeps of the QP's sources
	coldSrc     bool          // the message being sent comes from a source likely out of cache
	resend      bool          // the message being sent went out before (a go-back)
}

// ready reports whether the next WQE may be sent now.
func (r *requester) ready(qp *QP) bool {
	_, tail := qp.cfg.SQ.bounds()
	if r.wqe == tail || !r.rnrUntil.IsZero() {
		return false
	}
	w := qp.cfg.SQ.slot(r.wqe)
	return r.mayStart(qp, w) && r.credit(qp, w, false)
}

// sendWindow returns the send window in PSNs.
func (qp *QP) sendWindow() int {
	if qp.cfg.Window > 0 {
		return qp.cfg.Window
	}
	return MaxUnackedPSNs
}

// window returns the PSNs the requester may send ahead of the oldest
// unacknowledged one now: the send window, or less after a loss.
func (qp *QP) window() int { return qp.req.cc.limit(qp.sendWindow()) }

// mayStart applies the checks that hold a WQE back.
func (r *requester) mayStart(qp *QP, w *sendWQE) bool {
	if !qp.reliable() {
		return true // UC and UD wait for nothing: no ACKs, no READs or atomics
	}
	// The send window (rxe: req.psn may run at most MAX_UNACKED_PSNS ahead of comp.psn).
	// READ responses count in it, and the peer sends them in one burst
	// with no window of its own: a READ waits while more than rxe's 128
	// response PSNs are outstanding, however large the window, so that a
	// slow responder (rxe in a small VM) is not flooded.
	win := qp.window()
	if w.wr.Opcode == WRRDMARead && r.offset == 0 {
		win = min(win, MaxUnackedPSNs)
	}
	if r.psn.Diff(qp.comp.psn) > win {
		return false
	}
	if r.offset > 0 {
		return true // in the middle of a message
	}
	// IBA 10.8.3.3: a fenced WQE waits for earlier RDMA READs and atomics.
	if w.wr.Flags&SendFence != 0 && r.rdAtomicOut > 0 {
		return false
	}
	// IBA 9.7.4.1.8: at most max_rd_atomic READs and atomics outstanding.
	if w.isReadOrAtomic() && r.rdAtomicOut >= qp.path.MaxRdAtomic {
		return false
	}
	return true
}

// request sends packets while the window and credits allow.
func (qp *QP) request(now Clock) {
	r := &qp.req
	if !r.rnrUntil.IsZero() {
		if now.Now().Before(r.rnrUntil) {
			return
		}
		r.rnrUntil = 0
	}
	_, tail := qp.cfg.SQ.bounds()
	for r.wqe != tail && qp.state == qpstate.RTS {
		w := qp.cfg.SQ.slot(r.wqe)
		if w.acked && w.failed == WCSuccess {
			// Acknowledged while being resent (a response to its first
			// transmission overtook the resend): go on after its PSNs,
			// which the next WQE must not take again.
			if end := w.firstPSN.Add(w.npkts); r.psn.Before(end) {
				r.psn = end
			}
			r.wqe, r.offset = r.wqe+1, 0
			continue
		}
		if w.failed != WCSuccess || !r.mayStart(qp, w) {
			return
		}
		if w.wr.Opcode == WRLocalInv {
			qp.localInvalidate(w)
			r.wqe++
			continue
		}
		if !r.credit(qp, w, true) {
			return // the budget runs the QP again when it has PSNs
		}
		if qp.cfg.Type == qpstate.UD {
			qp.sendDatagram(w)
		} else if !qp.sendPacket(w, tail) {
			return
		}
		qp.comp.armTimer(qp, now)
		if w.sent {
			r.wqe++
			r.offset = 0
		}
	}
}

// localInvalidate executes LOCAL_INV (IBA 10.6.5): the region behind the
// R_Key stops accepting it at once.
func (qp *QP) localInvalidate(w *sendWQE) {
	w.firstPSN, w.npkts = qp.req.psn, 0
	w.started, w.sent, w.acked = true, true, true
	if err := qp.cfg.Mem.Invalidate(qp.cfg.PD, w.wr.InvRKey); err != nil {
		w.failed = WCLocProtErr
	}
}

// sendOpcode picks the opcode of a SEND or RDMA WRITE packet (IBA 9.2.1).
func sendOpcode(w *sendWQE, first, last bool) uint8 {
	pos := position(first, last)
	switch w.wr.Opcode {
	case WRSend, WRSendWithImm, WRSendWithInv:
		op := sendOps[pos]
		switch {
		case !last:
		case w.wr.Opcode == WRSendWithImm:
			op++ // SEND_LAST_WITH_IMMEDIATE, SEND_ONLY_WITH_IMMEDIATE
		case w.wr.Opcode == WRSendWithInv && first:
			op = wire.OpSendOnlyInv
		case w.wr.Opcode == WRSendWithInv:
			op = wire.OpSendLastInv
		}
		return op
	default: // RDMA WRITE
		op := writeOps[pos]
		if last && w.wr.Opcode == WRRDMAWriteWithImm {
			op++ // RDMA_WRITE_LAST_WITH_IMMEDIATE, RDMA_WRITE_ONLY_WITH_IMMEDIATE
		}
		return op
	}
}

// emitPayload builds and emits a packet with headers h and the next n
// bytes of w's payload: sent from the MR where the device gathers
// (Env.Gathers) and the bytes lie in one SGE, copied into the packet
// otherwise. It returns false if the SGL fails its checks.
func (qp *QP) emitPayload(w *sendWQE, h *wire.Headers, n int) bool {
	off := qp.req.offset
	if n > 0 && len(w.inline) == 0 && qp.env.Gathers() {
		if off == 0 {
			// A message of one packet is not judged: the link reads its
			// payload right after it is built, too soon for a prefetch to
			// gain anything, and the judgement costs an atomic add on a
			// clock the device's workers share, on every ping-pong
			// message.
			//
			// A message sent again after a go-back is not judged either:
			// its source was read moments ago, and cold_sources counts
			// messages, not their transmissions.
			qp.req.coldSrc = !qp.req.resend && w.length > uint64(qp.path.MTU) && qp.cfg.Placement.coldSource(&qp.req.src, w.length)
			if qp.req.coldSrc {
				qp.cfg.Stats.Inc(stats.ColdSources)
			}
		}
		src, err := qp.cfg.Mem.Slice(qp.cfg.PD, w.sgl, off, n)
		if err != nil {
			return false
		}
		if src != nil {
			if qp.req.coldSrc {
				// The link reads the payload when it writes the batch
				// (Placement): ask for its lines now.
				prefetch.ReadSlice(src)
			}
			qp.emitGather(h, src)
			return true
		}
	}
	b := qp.env.Buffer()[:wire.BuildLen(h.BTH.Opcode, n)]
	hdr := h.Encode(b)
	if n > 0 {
		dst := b[hdr : hdr+n]
		if len(w.inline) > 0 {
			copy(dst, w.inline[off:])
		} else if _, err := qp.cfg.Mem.Gather(qp.cfg.PD, w.sgl, off, dst); err != nil {
			return false
		}
	}
	wire.BTH(b).SetPadCount(wire.PadCount(n))
	clear(b[hdr+n:])
	qp.emit(b)
	return true
}

// followed reports whether w, whose last packet is being built, is a
// message whose ACK nobody needs: a SEND or WRITE, not signaled, sent for
// the first time (a resend asks as rxe does, so a recovery never waits on
// a later message), and request goes on at once to the next of the WQEs
// it found posted (tail), another SEND or WRITE that nothing holds back
// but the window, whose AckReq cadence asks in time.
func (r *requester) followed(qp *QP, w *sendWQE, tail uint64) bool {
	if !streams(w) || w.signaled || r.psn != r.maxPSN || r.wqe+1 == tail {
		return false
	}
	next := qp.cfg.SQ.slot(r.wqe + 1)
	return streams(next) && next.wr.Flags&SendFence == 0 && next.failed == WCSuccess
}

// lastSignaled reports whether the WQE being sent, a signaled one, is the
// last signaled one of the run request found posted (up to tail, looking
// pushLookahead WQEs ahead) and not the run's last WQE: its completion is
// the one the application waits for next, and it is worth writing before
// the rest of the run is built (Env.Push). When every WR is signaled, the
// run's last is the one, and it goes with the turn's last write anyway.
func (r *requester) lastSignaled(qp *QP, tail uint64) bool {
	if r.wqe+1 == tail {
		return false
	}
	for i := r.wqe + 1; i != tail && i != r.wqe+1+pushLookahead; i++ {
		if qp.cfg.SQ.slot(i).signaled {
			return false
		}
	}
	return true
}

// pushLookahead bounds how far lastSignaled looks for another signaled
// WQE: past it, the WR being sent is waited for long before the next one.
const pushLookahead = 128

// splitWrite reports whether w's packets go as RDMA WRITE messages of
// their own (Path.SplitWrites): an RC RDMA WRITE without immediate of
// more than one packet.
//
// Each packet is then a complete RDMA WRITE ONLY (IBA 9.7.5.2.2): a RETH
// whose DMA length is the packet's payload, the VA where that payload
// goes and the WR's R_Key, so the responder checks each packet's range on
// its own. The responder places them in PSN order only (IBA 9.7.5.1.4: a
// PSN beyond the expected one is NAKed), and the WR completes when the
// last is acknowledged, as it does after a LAST. A WRITE without
// immediate raises nothing at the responder, so what the peer can tell
// apart is its MSN, which counts the packets, and a WRITE that fails
// part-way (an R_Key that covers only the start of the range) has placed
// its leading packets, where a FIRST checked for the whole length would
// have placed none: the WR completes with an error and nothing restores
// the bytes, as after a message NAKed past its FIRST. A WRITE with
// immediate stays one message: its receive completion reports the
// message's length (ibv_wc.byte_len, which rxe takes from the RETH's DMA
// length), and only one RETH for the whole can carry it. UC keeps whole
// messages too: there a lost packet must drop the message, not leave a
// hole.
func (qp *QP) splitWrite(w *sendWQE) bool {
	return qp.path.SplitWrites && qp.reliable() && w.npkts > 1 && w.wr.Opcode == WRRDMAWrite
}

// streams reports whether w is a SEND or an RDMA WRITE: a message that
// needs nothing back but its ACK.
func streams(w *sendWQE) bool {
	switch w.wr.Opcode {
	case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRSendWithInv:
		return true
	}
	return false
}

// sendPacket builds and emits the next packet of w. It returns false if
// the WQE failed locally (its status is set and the completer reports it).
func (qp *QP) sendPacket(w *sendWQE, tail uint64) bool {
	r := &qp.req
	mtu := uint64(qp.path.MTU)
	h := wire.Headers{BTH: wire.BTHFields{PKey: qp.path.PKey, DestQP: qp.path.DestQPN, PSN: uint32(r.psn)}}
	var payload uint64
	first := r.offset == 0
	if first {
		r.resend = w.started
		w.firstPSN, w.started = r.psn, true
		w.npkts = packets(w.length, qp.path.MTU)
	}
	last := true
	switch w.wr.Opcode {
	case WRRDMARead:
		h.BTH.Opcode = wire.OpReadRequest
		h.RETH = wire.RETHFields{VA: w.wr.RemoteAddr + r.offset, RKey: w.wr.RKey, DMALen: uint32(w.length - r.offset)}
	case WRAtomicCmpAndSwp:
		h.BTH.Opcode = wire.OpCompareSwap
		h.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.Swap, Compare: w.wr.CompareAdd}
	case WRAtomicFetchAndAdd:
		h.BTH.Opcode = wire.OpFetchAdd
		h.AtomicETH = wire.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
	default:
		payload = min(w.length-r.offset, mtu)
		last = r.offset+payload == w.length
		h.BTH.Opcode = wire.Opcode(sendOpcode(w, first, last)) | wire.Opcode(qp.transport())<<5
		h.RETH = wire.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: uint32(w.length)}
		if qp.splitWrite(w) {
			h.BTH.Opcode = wire.OpWriteOnly
			h.RETH = wire.RETHFields{VA: w.wr.RemoteAddr + r.offset, RKey: w.wr.RKey, DMALen: uint32(payload)}
		}
		h.ImmDt.Imm = w.wr.Imm
		h.IETH.RKey = w.wr.InvRKey
		// IBA 9.2.2 (rxe init_req_packet): the solicited bit goes on the
		// last packet of a SEND or of an RDMA WRITE with immediate.
		h.BTH.SE = last && w.wr.Flags&SendSolicited != 0 && w.wr.Opcode != WRRDMAWrite
	}
	// AckReq may be set on any packet (IBA 9.2.2); the responder answers
	// the packets that ask, and one ACK covers every earlier PSN (IBA
	// 9.7.5.1.2). rxe asks on the last packet of every message and on any
	// packet after more than MaxPktPerAck without one. goroce asks as rxe
	// does, except on the last packet of a message that another follows
	// in this same run of sends (r.followed): nobody waits for that ACK,
	// and the next message's will cover it. A bandwidth test's burst of
	// small messages then costs the responder one ACK per MaxPktPerAck
	// packets and one at its end, not one per batch it reads. UC asks for
	// no ACKs (IBA 9.8, unreliable service: no acknowledgements; rxe
	// init_req_packet).
	//
	// A window smaller than that cadence would stall with no ACK to come
	// (and wait for the retry timer), so the packet that fills such a
	// window asks for one too. With windows of 65 PSNs and more, the
	// cadence leaves one asking packet in every window's worth. The
	// congestion window is such a window when a loss cut it that small.
	win := qp.window()
	fills := win <= MaxPktPerAck && r.psn.Diff(qp.comp.psn) >= win
	ends := last && !r.followed(qp, w, tail)
	h.BTH.AckReq = qp.reliable() && (ends || r.noackPkts > MaxPktPerAck || fills || r.exhausts(qp))
	r.noackPkts++
	if h.BTH.AckReq {
		r.noackPkts = 0
	}

	if !qp.emitPayload(w, &h, int(payload)) {
		// IBA 10.7.3.3: a bad local key or address is a local protection error.
		w.failed = WCLocProtErr
		w.sent, w.acked = true, true
		return false
	}
	if last && w.signaled && r.lastSignaled(qp, tail) {
		qp.env.Push()
	}

	switch w.wr.Opcode {
	case WRRDMARead:
		r.psn = r.psn.Add(packets(w.length-r.offset, qp.path.MTU)) // a zero-length READ still takes one PSN
		r.rdAtomicOut++
		w.sent = true
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		r.psn = r.psn.Next()
		r.rdAtomicOut++
		w.sent = true
	default:
		r.psn = r.psn.Next()
		r.offset += payload
		w.sent = last
		// IBA 9.8 (UC): a message is complete once its last packet has
		// gone; nothing is acknowledged or resent.
		w.acked = last && !qp.reliable()
	}
	if r.psn.After(r.maxPSN) {
		r.maxPSN = r.psn
	}
	return true
}
