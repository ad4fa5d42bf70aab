package transport

import (
	"errors"

	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// responder executes request packets (IBA 9.7.5, rxe_resp.c):
//
//	check PSN      expected: go on; later: one PSN sequence error NAK (then silence
//	               until the expected PSN arrives); earlier: duplicate, answer again
//	check opcode   sequence (FIRST → MIDDLE… → LAST) and QP access rights
//	check keys     R_Key, bounds and MR rights before any byte is touched
//	execute        SEND into the receive WQE, WRITE into the MR, READ and atomics
//	respond        ACK (coalesced), NAK, read response, atomic ACK — in PSN order
//
// Every packet it sends goes through one ordered queue (out), so an ACK
// never overtakes an earlier read response, and consecutive ACKs coalesce.
type responder struct {
	psn     psn.PSN // expected PSN
	msn     uint32  // message sequence number (24 bits)
	nakSent bool    // a PSN sequence error NAK is outstanding

	inMsg    bool // between a FIRST and its LAST
	dropMsg  bool // UC: the message in progress lost a packet; drop until the next FIRST/ONLY
	msgKind  wire.Kind
	recv     recvWQE // receive WQE of the SEND (or WRITE with immediate) in progress
	haveRecv bool
	recvOff  uint64
	write    []byte // RDMA WRITE target, checked when the FIRST packet arrived
	writeOff uint64
	writeMR  *memory.Region // the region r.write lies in, told when the message is placed
	writeNT  bool           // place r.write with non-temporal stores (Placement)
	writeEnd uint64         // the VA one past the last WRITE placed in writeMR
	reuse    reuse          // what Placement keeps of this QP's WRITEs

	readQ    []respJob // responses waiting to be sent, in PSN order
	stats    *stats.Counters
	depth    int // max_dest_rd_atomic
	atomics  []atomicResult
	atomicAt int
}

// respJob is one response to send: an ACK/NAK, a (partly sent) RDMA READ
// response, or an atomic acknowledge.
type respJob struct {
	kind     wire.Kind // KindAck, KindRead, KindAtomic
	psn      psn.PSN
	msn      uint32
	syndrome uint8
	data     []byte // READ: the bytes still to send
	dup      bool   // the answer to a duplicate request: it uses no new resource
	sent     int    // READ: response packets already sent
	orig     uint64 // atomic: the original value
}

// atomicResult remembers an executed atomic so a duplicate request is
// answered with the same value and not executed twice (IBA 9.7.5.1.3).
type atomicResult struct {
	psn  psn.PSN
	orig uint64
	ok   bool
}

func (r *responder) init() { r.setDepth(1) }
func (r *responder) reset() {
	*r = responder{readQ: r.readQ[:0], atomics: r.atomics}
	r.setDepth(len(r.atomics))
}

func (r *responder) setDepth(n int) {
	r.depth = n
	if len(r.atomics) != n {
		r.atomics, r.atomicAt = make([]atomicResult, n), 0
	}
}

func (r *responder) readsPending() bool { return len(r.readQ) > 0 }

// readDataPending reports whether READ response data is still to be sent.
func (r *responder) readDataPending() bool {
	for i := range r.readQ {
		if r.readQ[i].kind == wire.KindRead {
			return true
		}
	}
	return false
}

// outstanding counts READ responses and atomic replies not yet sent.
func (r *responder) outstanding() int {
	n := 0
	for i := range r.readQ {
		if r.readQ[i].kind != wire.KindAck && !r.readQ[i].dup {
			n++
		}
	}
	return n
}

// queueAck queues an ACK or NAK; an ACK right behind another queued ACK
// replaces it (coalescing, rxe's ack_deferred).
func (r *responder) queueAck(syndrome uint8, p psn.PSN) {
	if n := len(r.readQ); n > 0 && syndrome == wire.Syndrome(wire.AckTypeACK, wire.CreditsInvalid) {
		if j := &r.readQ[n-1]; j.kind == wire.KindAck && j.syndrome == syndrome {
			j.psn, j.msn = p, r.msn
			r.stats.Inc(stats.AckDeferred)
			return
		}
	}
	r.readQ = append(r.readQ, respJob{kind: wire.KindAck, psn: p, msn: r.msn, syndrome: syndrome})
}

var ackSyndrome = wire.Syndrome(wire.AckTypeACK, wire.CreditsInvalid)

// handleRequest runs one request packet through the responder.
func (qp *QP) handleRequest(p *wire.Packet, o Origin) {
	r := &qp.resp
	pn := psn.PSN(p.BTH.PSN())
	switch qp.cfg.Type {
	case qpstate.UD:
		qp.recvDatagram(p, o)
		return
	case qpstate.UC:
		if qp.ucSequence(p, pn) {
			qp.execute(p, pn)
		}
		return
	}
	switch d := pn.Diff(r.psn); {
	case d > 0:
		// IBA 9.7.5.1.4 (C9-97): a PSN beyond the expected one. NAK it
		// once, then drop until the expected PSN comes back.
		qp.cfg.Stats.Inc(stats.OutOfSeqRequest)
		if !r.nakSent {
			r.nakSent = true
			r.queueAck(wire.Syndrome(wire.AckTypeNAK, uint8(wire.NAKPSNSeqError)), r.psn)
		}
		return
	case d < 0:
		qp.cfg.Stats.Inc(stats.DuplicateRequest)
		qp.duplicate(p, pn)
		return
	}
	r.nakSent = false
	// Requests execute in PSN order (IBA 9.5): a READ's data is read before
	// any later request changes memory, so queued READ responses go out
	// now, before this request executes.
	if r.readDataPending() {
		qp.sendResponses(true)
	}
	info := p.Info
	// IBA 9.7.5.1.5: the opcode must continue the message in progress, or
	// start a new one.
	if r.inMsg != !info.Position.IsFirst() || r.inMsg && info.Kind != r.msgKind {
		qp.rejectRequest(p, pn, errOpSequence)
		return
	}
	qp.execute(p, pn)
}

// execute runs a request whose PSN and opcode sequence are right.
func (qp *QP) execute(p *wire.Packet, pn psn.PSN) {
	switch p.Info.Kind {
	case wire.KindSend:
		qp.respSend(p, pn)
	case wire.KindWrite:
		qp.respWrite(p, pn)
	case wire.KindRead:
		qp.respRead(p, pn)
	case wire.KindAtomic:
		qp.respAtomic(p, pn)
	default: // FLUSH, ATOMIC_WRITE: not offered yet
		qp.responderError(pn, errUnsupportedOp)
	}
}

// placesWhileChecking reports whether respWrite may take p with its ICRC
// still pending, to check it while placing the payload: an RC WRITE
// without immediate data, at the expected PSN. Every way such a packet can
// end other than being placed (rejectRequest) checks the ICRC first, and
// one that fails is dropped where it would have been placed, before it has
// any effect: the PSN, the message state and the ACKs move only after the
// payload is in.
func (qp *QP) placesWhileChecking(p *wire.Packet) bool {
	return qp.reliable() && p.Info.Class == wire.ClassRequest && p.Info.Kind == wire.KindWrite &&
		p.ImmDt == nil && psn.PSN(p.BTH.PSN()) == qp.resp.psn && qp.canReceive()
}

// rejectRequest is responderError for a request whose ICRC may still be
// pending (placesWhileChecking): a damaged packet is dropped instead, as
// if it had never arrived.
func (qp *QP) rejectRequest(p *wire.Packet, pn psn.PSN, err respError) {
	if p.CheckICRC() {
		qp.responderError(pn, err)
	}
}

// accept moves past a request packet: next PSN, MSN at the end of a
// message, and an ACK when the requester asked for one.
func (qp *QP) accept(p *wire.Packet, pn psn.PSN) {
	r := &qp.resp
	r.psn = pn.Next()
	last := p.Info.Position.IsLast()
	r.inMsg, r.msgKind = !last, p.Info.Kind
	if last {
		r.msn = (r.msn + 1) & 0xffffff
	}
	if p.BTH.AckReq() && qp.reliable() {
		r.queueAck(ackSyndrome, pn)
	}
}

// takeRecv gets a receive WQE for a new message; without one the request
// is answered with an RNR NAK (IBA 9.7.5.2.8) and not accepted.
func (qp *QP) takeRecv(pn psn.PSN) bool {
	r := &qp.resp
	if r.haveRecv {
		return true
	}
	if !qp.cfg.RQ.pop(&r.recv) {
		if !qp.reliable() {
			// IBA 9.8 (rxe class D): UC has no RNR NAK; the message is dropped.
			r.discard()
			return false
		}
		qp.cfg.Stats.Inc(stats.SendRNRErr)
		r.queueAck(wire.Syndrome(wire.AckTypeRNRNAK, qp.path.MinRNRTimer), pn)
		return false
	}
	r.haveRecv, r.recvOff = true, 0
	return true
}

// respSend places SEND payload into the receive WQE (IBA 9.7.5.2.1).
func (qp *QP) respSend(p *wire.Packet, pn psn.PSN) {
	r := &qp.resp
	if p.Info.Position.IsFirst() && !qp.takeRecv(pn) {
		return
	}
	if !qp.placeRecv(p, pn) {
		return
	}
	qp.accept(p, pn)
	if p.Info.Position.IsLast() {
		wc := WC{WRID: r.recv.wrid, Opcode: WCRecv, ByteLen: uint32(r.recvOff), QPNum: qp.cfg.QPN, SrcQP: qp.path.DestQPN}
		if p.ImmDt != nil {
			wc.Flags, wc.Imm = WCWithImm, p.ImmDt.Imm()
		}
		if p.IETH != nil {
			// IBA 9.4.1.1: SEND with invalidate revokes the named R_Key.
			if err := qp.cfg.Mem.Invalidate(qp.cfg.PD, p.IETH.RKey()); err != nil {
				qp.responderError(pn, errInvalidateRKey)
				return
			}
			wc.Flags, wc.InvRKey = WCWithInv, p.IETH.RKey()
		}
		r.haveRecv = false
		qp.cfg.Stats.Inc(stats.RDMARecvs)
		qp.cfg.RecvCQ.Push(wc, p.BTH.SE())
	}
}

// placeRecv scatters payload into the receive WQE; a message longer than
// the buffers is a length error (IBA 9.7.5.2.1: invalid request NAK, and
// LOC_LEN_ERR on the receive WQE).
func (qp *QP) placeRecv(p *wire.Packet, pn psn.PSN) bool {
	r := &qp.resp
	n := uint64(len(p.Payload))
	if r.recvOff+n > memory.TotalLength(r.recv.sgl) {
		qp.responderError(pn, errRecvLength)
		return false
	}
	if n > 0 {
		if _, err := qp.cfg.Mem.Scatter(qp.cfg.PD, r.recv.sgl, r.recvOff, p.Payload); err != nil {
			qp.responderError(pn, errRecvProtection)
			return false
		}
	}
	r.recvOff += n
	return true
}

// checkRemote validates an R_Key, address range and rights (IBA 9.7.5.2.4:
// a violation is a remote access error, and no memory is touched).
func (qp *QP) checkRemote(p *wire.Packet, pn psn.PSN, rkey uint32, va, n uint64, need memory.Access) ([]byte, *memory.Region, bool) {
	mr, err := qp.cfg.Mem.Remote(qp.cfg.PD, rkey)
	if err == nil {
		var b []byte
		if b, err = mr.CheckRemote(va, n, need); err == nil {
			return b, mr, true
		}
	}
	qp.rejectRequest(p, pn, errRKeyViolation)
	return nil, nil, false
}

// respWrite places RDMA WRITE payload (IBA 9.7.5.2.2).
func (qp *QP) respWrite(p *wire.Packet, pn psn.PSN) {
	r := &qp.resp
	// IBA 9.7.5.2.2 / rxe check_op_valid: the QP must allow remote writes.
	if qp.path.Access&memory.AccessRemoteWrite == 0 {
		qp.rejectRequest(p, pn, errQPAccess)
		return
	}
	// cont: this message starts in the region where the QP's previous
	// WRITE ended, as each WRITE_ONLY of a split WRITE does (Path.SplitWrites).
	cont := false
	if p.RETH != nil {
		prevMR, prevNT := r.writeMR, r.writeNT
		r.write, r.writeMR, r.writeOff, r.writeNT = nil, nil, 0, false
		// IBA 9.7.5.2.2: a zero-length WRITE checks no R_Key.
		if n := uint64(p.RETH.DMALen()); n > 0 {
			b, mr, ok := qp.checkRemote(p, pn, p.RETH.RKey(), p.RETH.VA(), n, memory.AccessRemoteWrite)
			if !ok {
				return
			}
			r.write, r.writeMR = b, mr
			cont = mr == prevMR && p.RETH.VA() == r.writeEnd
			r.writeNT = cont && prevNT
		}
	}
	n := uint64(len(p.Payload))
	last := p.Info.Position.IsLast()
	if r.writeOff+n > uint64(len(r.write)) || last && r.writeOff+n != uint64(len(r.write)) ||
		!last && n != uint64(qp.path.MTU) {
		qp.rejectRequest(p, pn, errWriteLength)
		return
	}
	if p.ImmDt != nil && !qp.takeRecv(pn) {
		return // RNR: nothing placed yet; the requester resends this packet
	}
	first := p.RETH != nil && len(r.write) > 0
	countNT := false
	if first {
		// Decided once the message is sure to be placed: a packet an RNR
		// NAK sends back is not counted twice.
		wasNT := r.writeNT // a run that continues, already cold, is not counted again
		r.writeNT = qp.cfg.Placement.cold(&r.reuse, uint64(len(r.write)), cont)
		countNT = r.writeNT && !wasNT
	}
	var ok bool
	if r.writeNT {
		ok = copyPayloadNT(p, r.write[r.writeOff:])
	} else {
		ok = p.CopyPayload(r.write[r.writeOff:])
	}
	if !ok {
		return // a deferred ICRC was wrong: dropped, nothing else changed
	}
	if first {
		r.writeEnd = p.RETH.VA() + uint64(len(r.write))
	}
	if countNT {
		qp.cfg.Stats.Inc(stats.ColdWrites)
	}
	r.writeOff += n
	if last && r.writeMR != nil {
		r.writeMR.NoteRemoteWrite(uint64(len(r.write)))
	}
	qp.accept(p, pn)
	if p.ImmDt != nil {
		wc := WC{WRID: r.recv.wrid, Opcode: WCRecvRDMAWithImm, ByteLen: uint32(r.writeOff), Imm: p.ImmDt.Imm(),
			Flags: WCWithImm, QPNum: qp.cfg.QPN, SrcQP: qp.path.DestQPN}
		r.haveRecv = false
		qp.cfg.Stats.Inc(stats.RDMARecvs)
		qp.cfg.RecvCQ.Push(wc, p.BTH.SE())
	}
}

// respRead queues an RDMA READ response (IBA 9.7.5.2.3).
func (qp *QP) respRead(p *wire.Packet, pn psn.PSN) {
	r := &qp.resp
	switch {
	case qp.path.Access&memory.AccessRemoteRead == 0:
		qp.responderError(pn, errQPAccess)
		return
	case r.outstanding() >= r.depth:
		qp.responderError(pn, errTooManyRdAtomic)
		return
	}
	n := uint64(p.RETH.DMALen())
	var data []byte
	if n > 0 {
		b, _, ok := qp.checkRemote(p, pn, p.RETH.RKey(), p.RETH.VA(), n, memory.AccessRemoteRead)
		if !ok {
			return
		}
		data = b
	}
	npkts := packets(n, qp.path.MTU)
	r.msn = (r.msn + 1) & 0xffffff
	r.readQ = append(r.readQ, respJob{kind: wire.KindRead, psn: pn, msn: r.msn, data: data})
	r.psn = pn.Add(npkts)
	r.inMsg = false
}

// respAtomic executes CMP_SWAP or FETCH_ADD (IBA 9.7.5.2.5) on 8 aligned bytes.
func (qp *QP) respAtomic(p *wire.Packet, pn psn.PSN) {
	r := &qp.resp
	a := p.AtomicETH
	switch {
	case qp.path.Access&memory.AccessRemoteAtomic == 0:
		qp.responderError(pn, errQPAccess)
		return
	case r.outstanding() >= r.depth:
		qp.responderError(pn, errTooManyRdAtomic)
		return
	}
	mr, err := qp.cfg.Mem.Remote(qp.cfg.PD, a.RKey())
	var b []byte
	if err == nil {
		b, err = mr.CheckAtomic(a.VA(), memory.AccessRemoteAtomic)
	}
	switch {
	case errors.Is(err, memory.ErrAlign):
		// IBA 9.7.5.2.5 / rxe: a misaligned atomic is an invalid request.
		qp.responderError(pn, errMisalignedAtomic)
		return
	case err != nil:
		qp.responderError(pn, errRKeyViolation)
		return
	}
	var orig uint64
	if p.BTH.Opcode().Op() == wire.OpCompareSwap {
		orig = memory.CompareSwap(b, a.Compare(), a.SwapAdd())
	} else {
		orig = memory.FetchAdd(b, a.SwapAdd())
	}
	r.atomics[r.atomicAt] = atomicResult{psn: pn, orig: orig, ok: true}
	r.atomicAt = (r.atomicAt + 1) % len(r.atomics)
	r.msn = (r.msn + 1) & 0xffffff
	r.readQ = append(r.readQ, respJob{kind: wire.KindAtomic, psn: pn, msn: r.msn, orig: orig})
	r.psn = pn.Next()
	r.inMsg = false
}

// duplicate answers a request the responder has already executed (IBA
// 9.7.5.1.6): SEND and WRITE get an ACK again, READ is answered again from
// memory, an atomic with the value it returned the first time.
func (qp *QP) duplicate(p *wire.Packet, pn psn.PSN) {
	r := &qp.resp
	switch p.Info.Kind {
	case wire.KindRead:
		if n := uint64(p.RETH.DMALen()); n > 0 {
			mr, err := qp.cfg.Mem.Remote(qp.cfg.PD, p.RETH.RKey())
			if err != nil {
				return
			}
			b, err := mr.CheckRemote(p.RETH.VA(), n, memory.AccessRemoteRead)
			if err != nil {
				return
			}
			r.readQ = append(r.readQ, respJob{kind: wire.KindRead, psn: pn, msn: r.msn, data: b, dup: true})
		} else {
			r.readQ = append(r.readQ, respJob{kind: wire.KindRead, psn: pn, msn: r.msn, dup: true})
		}
	case wire.KindAtomic:
		for _, a := range r.atomics {
			if a.ok && a.psn == pn {
				r.readQ = append(r.readQ, respJob{kind: wire.KindAtomic, psn: pn, msn: r.msn, orig: a.orig, dup: true})
				return
			}
		}
	default:
		if p.BTH.AckReq() {
			r.queueAck(ackSyndrome, r.psn.Add(-1))
		}
	}
}

// responderError answers a request that failed check e with the NAK the
// error calls for, completes the receive WQE in progress if the error
// concerns it, and moves the QP to ERR (rxe does the same for these
// errors on an RC QP).
func (qp *QP) responderError(pn psn.PSN, e respError) {
	r := &qp.resp
	info := respErrors[e]
	if !qp.reliable() && e != errRecvProtection {
		// UC (rxe class D and E): no NAK and no error state; the rest of
		// the message is dropped and its receive WQE waits for the next.
		r.discard()
		return
	}
	if !qp.reliable() {
		qp.badRecvWQE() // a malformed receive WQE fails on every service (class A)
		return
	}
	r.queueAck(wire.Syndrome(wire.AckTypeNAK, uint8(info.nak)), pn)
	qp.sendResponses(true) // the NAK must leave before the flush
	if r.haveRecv && info.recv != WCSuccess {
		r.haveRecv = false
		qp.cfg.RecvCQ.Push(WC{WRID: r.recv.wrid, Status: info.recv, Opcode: WCRecv, QPNum: qp.cfg.QPN}, false)
	}
	qp.fatal(WCRemInvReqErr)
}

// sendResponses sends queued responses in order, at most readBurst read
// response packets unless all is set.
func (qp *QP) sendResponses(all bool) {
	r := &qp.resp
	budget := readBurst
	i := 0
	for ; i < len(r.readQ) && (all || budget > 0); i++ {
		j := &r.readQ[i]
		switch j.kind {
		case wire.KindAck:
			qp.sendAck(j.syndrome, j.psn, j.msn)
		case wire.KindAtomic:
			h := wire.Headers{BTH: qp.respBTH(wire.OpAtomicAcknowledge, j.psn)}
			h.AETH = wire.AETHFields{Syndrome: ackSyndrome, MSN: j.msn}
			h.AtomicAckETH.OrigData = j.orig
			qp.emitHeaders(&h, nil)
		case wire.KindRead:
			for len(j.data) > 0 || j.sent == 0 {
				if !all && budget == 0 {
					r.readQ = r.readQ[i:]
					return
				}
				qp.sendReadPacket(j)
				budget--
				if len(j.data) == 0 {
					break
				}
			}
		}
	}
	r.readQ = r.readQ[:copy(r.readQ, r.readQ[i:])]
}

// sendReadPacket sends the next RDMA READ response packet of j.
func (qp *QP) sendReadPacket(j *respJob) {
	mtu := qp.path.MTU
	n := min(len(j.data), mtu)
	op := readResponseOps[position(j.sent == 0, len(j.data) <= mtu)]
	h := wire.Headers{BTH: qp.respBTH(op, j.psn.Add(j.sent))}
	h.AETH = wire.AETHFields{Syndrome: ackSyndrome, MSN: j.msn}
	qp.emitHeaders(&h, j.data[:n])
	j.data = j.data[n:]
	j.sent++
}

func (qp *QP) respBTH(op uint8, p psn.PSN) wire.BTHFields {
	return wire.BTHFields{Opcode: wire.Opcode(op), PKey: qp.path.PKey, DestQP: qp.path.DestQPN, PSN: uint32(p)}
}

func (qp *QP) sendAck(syndrome uint8, p psn.PSN, msn uint32) {
	h := wire.Headers{BTH: qp.respBTH(wire.OpAcknowledge, p)}
	h.AETH = wire.AETHFields{Syndrome: syndrome, MSN: msn}
	qp.emitHeaders(&h, nil)
}

// emitHeaders builds a packet from headers and payload and emits it.
// A READ response's payload, a slice of the MR, is sent from there when
// the device gathers (Env.Gathers).
func (qp *QP) emitHeaders(h *wire.Headers, payload []byte) {
	if len(payload) > 0 && qp.env.Gathers() {
		qp.emitGather(h, payload)
		return
	}
	b := qp.env.Buffer()[:wire.BuildLen(h.BTH.Opcode, len(payload))]
	wire.Build(b, h, payload)
	qp.emit(b)
}
