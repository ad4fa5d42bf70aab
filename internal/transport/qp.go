// Package transport implements the Reliable Connected transport of IBA
// chapter 9.7 as three state machines per queue pair, the way Linux rxe
// divides the work:
//
//	requester  send WQEs → request packets     (requester.go; IBA 9.7.1-9.7.4)
//	responder  request packets → memory, ACKs,  (responder.go; IBA 9.7.5, 9.7.6)
//	           read responses, atomic replies
//	completer  ACKs, NAKs, responses → send     (completer.go; IBA 9.7.5.1, 9.9)
//	           completions, retries
//
// A QP is not safe for concurrent use: one goroutine, the QP's worker in
// the device, calls Receive, Progress, Timeout and FlushAcks. Only the
// posting methods (PostSend, and PostRecv on the receive queue) run on the
// caller's goroutine; they lock the queues and leave the rest to the
// worker. Time is an input: the worker passes now and asks Deadline when
// to call Timeout next.
package transport

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// Limits of the RC engines (rxe's values, rxe_param.h).
const (
	MaxUnackedPSNs = 128     // send window: PSNs in flight unless Config.Window says more (rxe MAX_UNACKED_PSNS)
	MaxPktPerAck   = 64      // AckReq cadence (rxe RXE_MAX_PKT_PER_ACK)
	MaxMessageSize = 1 << 31 // IBA: 2^31 bytes
	readBurst      = 64      // read response packets sent per Progress call
)

// Errors returned by PostSend and RecvQueue.Post.
var (
	ErrQueueFull      = errors.New("work queue full")
	ErrState          = errors.New("QP state does not allow posting")
	ErrOpcode         = errors.New("operation not supported on this QP")
	ErrTooManySGE     = errors.New("too many scatter/gather entries")
	ErrInline         = errors.New("inline data larger than max_inline_data")
	ErrMessageTooLong = errors.New("message longer than 2^31 bytes")
	ErrAtomicSGE      = errors.New("atomic operation needs one 8-byte local SGE")
	ErrNoAH           = errors.New("UD work request without an address handle")
)

// Clock gives the transport the time when a step needs it: to arm the
// retransmit or RNR timer, or to check one. Most packets arm none (an ACK
// that retires the last outstanding WQE, a WRITE placed, the ACK for it),
// and reading a clock costs tens of nanoseconds, so a device passes a
// Clock that reads its clock on the first Now of a step and answers the
// same after that (internal/device's worker).
//
// Now is a monotime.Time, never zero: the transport's deadlines are such
// readings plus a timeout, the zero Time meaning no deadline
// (QP.Deadline). Arming a timer is an addition, checking one a
// comparison, and a request arms one on every message it sends.
type Clock interface {
	Now() monotime.Time
}

// Env is what a QP needs from its device. The device's worker implements it.
type Env interface {
	// Buffer returns an empty buffer with capacity of at least
	// link.MaxPacket for an outgoing packet.
	Buffer() []byte
	// Emit queues a packet built in a Buffer for sending; the device
	// batches them and the link fills the ICRC.
	Emit(p link.Packet)
	// Fatal reports that the QP moved itself to the error state.
	Fatal(qp *QP, status WCStatus)
	// Gathers reports whether the link can send a payload from where it
	// lies (link.Packet.Payload) without copying it twice: the QP then
	// emits payloads that way when it can.
	Gathers() bool
	// Push says that the packets emitted so far should not wait for the
	// rest of the turn: the last one ends a signaled WR, whose completion
	// the application waits for, and more follow it. The device may write
	// them at once, so that the peer's ACK is on its way while the rest
	// are built.
	Push()
}

// CQ receives completions.
type CQ interface {
	// Push appends a completion; solicited marks completions of messages
	// with the solicited event bit (for solicited-only notification).
	Push(wc WC, solicited bool)
}

// Config holds what a QP is created with.
type Config struct {
	Type      qpstate.Type // RC (also the zero value), UC or UD
	QPN       uint32
	PD        uint32
	Mem       *memory.Table
	SendCQ    CQ
	RecvCQ    CQ
	SQ        *SendQueue
	RQ        *RecvQueue      // the QP's own receive queue or its SRQ
	SRQ       bool            // RQ is shared: do not flush it on error
	SigAll    bool            // sq_sig_all: every send WQE completes with a WC
	MaxSGE    int             // max_send_sge
	MaxInline int             // max_inline_data
	Stats     *stats.Counters // the device's counters; nil counts nothing

	// Window, when above 0, is the send window in PSNs instead of
	// MaxUnackedPSNs. The window is the requester's own limit, invisible
	// on the wire (IBA leaves it to the implementation); a responder
	// accepts any number of outstanding PSNs within half the PSN space.
	Window int

	// Budget, when set, is shared with other RC QPs: together they have
	// no more PSNs in flight than it grants (see Budget).
	Budget *Budget

	// Placement, when set, is the device's policy for storing RDMA WRITE
	// payload around the cache; nil stores it the ordinary way.
	Placement *Placement
}

// Path holds the connection attributes that modify_qp sets on the way to
// RTS (IBA 10.3): the peer and the protocol parameters.
type Path struct {
	DestQPN         uint32
	Peer            netip.AddrPort // the peer's address, UDP port 4791
	SrcPort         uint16         // UDP source port of this QP's packets
	MTU             int            // path MTU in bytes: 256, 512, 1024, 2048 or 4096
	SQPSN, RQPSN    psn.PSN
	MaxRdAtomic     int           // outstanding RDMA READs and atomics this QP may initiate
	MaxDestRdAtomic int           // outstanding ones it accepts as responder
	Timeout         uint8         // local ACK timeout: 4.096 µs × 2^Timeout; 0 disables
	RetryCnt        uint8         // retries after a timeout or PSN sequence error NAK
	RNRRetry        uint8         // retries after an RNR NAK; 7 means forever
	MinRNRTimer     uint8         // RNR NAK timer code this QP sends as responder
	Access          memory.Access // remote operations this QP accepts
	PKey            uint16
	QKey            uint32 // UD: the Q_Key incoming datagrams must carry (IBA 10.2.5)

	// SplitWrites sends each packet of an RC RDMA WRITE (without
	// immediate) of more than one packet as an RDMA WRITE ONLY of its
	// own, each with a RETH for its own bytes, instead of FIRST,
	// MIDDLE…, LAST. All the packets of a run of WRITEs are then one
	// size, which is what UDP GSO needs to send them as one datagram: a
	// FIRST, 16 bytes longer for its RETH, otherwise makes every message
	// of three packets or more two datagrams. The peer sees several
	// WRITEs where one was posted: the same bytes in the same places, in
	// the same order, each packet's range checked against the R_Key (see
	// splitWrite, which also keeps UC and UD QPs from it).
	SplitWrites bool
}

// QP is the transport state of one queue pair: RC, UC or UD. UC and UD
// share the requester and responder with RC and leave out what makes RC
// reliable (see unreliable.go and datagram.go).
type QP struct {
	cfg   Config
	path  Path
	env   Env
	state qpstate.State

	req  requester
	comp completer
	resp responder

	budget budgetWait // its place in Config.Budget's queue
}

// NewQP creates a QP in the RESET state.
func NewQP(cfg Config, env Env) *QP {
	qp := &QP{cfg: cfg, env: env, state: qpstate.Reset}
	qp.resp.init()
	qp.resp.stats = cfg.Stats
	return qp
}

// QPN returns the QP number.
func (qp *QP) QPN() uint32 { return qp.cfg.QPN }

// RecvQueue returns the queue the QP takes receive WQEs from.
func (qp *QP) RecvQueue() *RecvQueue { return qp.cfg.RQ }

// State returns the QP's state as the transport sees it.
func (qp *QP) State() qpstate.State { return qp.state }

// SetPath sets the connection attributes. The verbs layer calls it on the
// transitions that carry them; PSNs take effect at once.
func (qp *QP) SetPath(p Path) {
	qp.path = p
	if p.MaxRdAtomic < 1 {
		qp.path.MaxRdAtomic = 1
	}
	qp.resp.setDepth(max(p.MaxDestRdAtomic, 1))
}

// SetState moves the QP to s (the verbs layer has validated the
// transition). Entering RTR starts the responder at the receive PSN,
// entering RTS the requester at the send PSN; entering ERR flushes every
// outstanding work request; entering RESET clears everything.
func (qp *QP) SetState(s qpstate.State) {
	old := qp.state
	qp.state = s
	switch s {
	case qpstate.Reset:
		qp.giveBackAll()
		qp.req, qp.comp = requester{}, completer{}
		qp.resp.reset()
		qp.cfg.SQ.clear()
		if !qp.cfg.SRQ {
			qp.cfg.RQ.drain(func(uint64) {})
		}
	case qpstate.RTR:
		if old != qpstate.RTR {
			qp.resp.psn = qp.path.RQPSN
		}
	case qpstate.RTS:
		if old == qpstate.RTR {
			qp.req.psn = qp.path.SQPSN
			qp.req.maxPSN = qp.path.SQPSN
			qp.comp.psn = qp.path.SQPSN
			head, _ := qp.cfg.SQ.bounds()
			qp.req.wqe, qp.comp.wqe = head, head
		}
	case qpstate.Err:
		qp.flush()
	}
}

// reliable reports whether the QP is RC (Config.Type zero means RC).
func (qp *QP) reliable() bool { return qp.cfg.Type != qpstate.UC && qp.cfg.Type != qpstate.UD }

// transport returns the wire transport of the QP's opcodes (IBA 9.2.1).
func (qp *QP) transport() wire.Transport {
	switch qp.cfg.Type {
	case qpstate.UC:
		return wire.UC
	case qpstate.UD:
		return wire.UD
	}
	return wire.RC
}

// canSend reports whether the requester may send (IBA 10.3.1: RTS; SQD
// drains what was started).
func (qp *QP) canSend() bool { return qp.state == qpstate.RTS }

// canReceive reports whether the responder accepts requests (RTR and on).
func (qp *QP) canReceive() bool {
	return qp.state == qpstate.RTR || qp.state == qpstate.RTS || qp.state == qpstate.SQD
}

// PostSend appends send work requests to the send queue. It returns the
// index of the first work request it rejected (len(wrs) if none) and the
// reason. Nothing after a rejected work request is posted.
func (qp *QP) PostSend(wrs []SendWR, state qpstate.State) (int, error) {
	switch state {
	case qpstate.RTS, qpstate.SQD, qpstate.SQE, qpstate.Err:
	default:
		return 0, fmt.Errorf("%w (%v)", ErrState, state)
	}
	sq := qp.cfg.SQ
	sq.mu.Lock()
	defer sq.mu.Unlock()
	tail := sq.tail.Load()
	for i := range wrs {
		wr := &wrs[i]
		if err := qp.checkWR(wr); err != nil {
			return i, err
		}
		if tail-sq.head.Load() == uint64(len(sq.ring)) {
			return i, ErrQueueFull
		}
		w := sq.slot(tail)
		sgl, inline := w.sgl, w.inline
		*w = sendWQE{wr: *wr, sgl: append(sgl[:0], wr.SGL...), inline: inline[:0]}
		w.wr.SGL = nil
		w.signaled = qp.cfg.SigAll || wr.Flags&SendSignaled != 0
		if wr.AH != nil {
			w.dest = wr.AH.Dest() // resolved now: the AH may go away after posting
			w.wr.AH = nil
		}
		w.length = memory.TotalLength(wr.SGL)
		switch wr.Opcode {
		case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
			w.length = 8
		case WRLocalInv:
			w.length = 0
		}
		if wr.Flags&SendInline != 0 && w.length > 0 {
			if uint64(cap(w.inline)) < w.length {
				w.inline = make([]byte, w.length, qp.cfg.MaxInline)
			}
			w.inline = w.inline[:w.length]
			if _, err := qp.cfg.Mem.Gather(qp.cfg.PD, w.sgl, 0, w.inline); err != nil {
				return i, fmt.Errorf("inline data: %w", err)
			}
		}
		tail++
		sq.tail.Store(tail) // publishes the slot to the worker
	}
	return len(wrs), nil
}

func (qp *QP) checkWR(wr *SendWR) error {
	// The operations each service offers (IBA 9.7.1 table 37 / rxe's
	// rxe_wr_opcode_info): UD only SENDs, UC SENDs and RDMA WRITEs.
	switch {
	case qp.cfg.Type == qpstate.UD:
		if wr.Opcode != WRSend && wr.Opcode != WRSendWithImm {
			return fmt.Errorf("%w: %v on a UD QP (SEND and SEND_WITH_IMM only)", ErrOpcode, wr.Opcode)
		}
		if wr.AH == nil {
			return ErrNoAH
		}
		if wr.RemoteQPN > 0xffffff {
			return fmt.Errorf("%w: remote QPN %#x has more than 24 bits", ErrOpcode, wr.RemoteQPN)
		}
	case qp.cfg.Type == qpstate.UC:
		switch wr.Opcode {
		case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm:
		default:
			return fmt.Errorf("%w: %v on a UC QP (SEND and RDMA WRITE only)", ErrOpcode, wr.Opcode)
		}
	default:
		switch wr.Opcode {
		case WRRDMAWrite, WRRDMAWriteWithImm, WRSend, WRSendWithImm, WRRDMARead,
			WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRLocalInv, WRSendWithInv:
		default:
			return fmt.Errorf("%w: %v", ErrOpcode, wr.Opcode)
		}
	}
	if len(wr.SGL) > qp.cfg.MaxSGE {
		return fmt.Errorf("%w: %d SGEs, max_send_sge is %d", ErrTooManySGE, len(wr.SGL), qp.cfg.MaxSGE)
	}
	n := memory.TotalLength(wr.SGL)
	if n > MaxMessageSize {
		return fmt.Errorf("%w: %d bytes", ErrMessageTooLong, n)
	}
	switch wr.Opcode {
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return ErrAtomicSGE
		}
		if wr.Flags&SendInline != 0 {
			return fmt.Errorf("%w: inline atomic", ErrOpcode)
		}
	case WRRDMARead:
		if wr.Flags&SendInline != 0 {
			return fmt.Errorf("%w: inline RDMA READ", ErrOpcode)
		}
	}
	if wr.Flags&SendInline != 0 && n > uint64(qp.cfg.MaxInline) {
		return fmt.Errorf("%w: %d bytes, max_inline_data is %d", ErrInline, n, qp.cfg.MaxInline)
	}
	return nil
}

// Receive processes one packet addressed to this QP.
func (qp *QP) Receive(p *wire.Packet, now Clock) { qp.ReceiveFrom(p, Origin{}, now) }

// ReceiveFrom processes one packet addressed to this QP that came from
// where o says (UD receive buffers start with a GRH built from it).
func (qp *QP) ReceiveFrom(p *wire.Packet, o Origin, now Clock) {
	// IBA 9.6 (transport header validation; rxe check_type_state): a
	// packet whose opcode belongs to another transport than the QP's is
	// dropped.
	if p.Info.Transport != qp.transport() {
		return
	}
	// A packet whose ICRC the link left to the device (wire.Packet.
	// DeferICRC) is checked before anything in it is acted on, except a
	// WRITE that respWrite places in the pass that checks it.
	if p.ICRCPending() && !qp.placesWhileChecking(p) && !p.CheckICRC() {
		return
	}
	switch p.Info.Class {
	case wire.ClassRequest:
		if qp.canReceive() {
			qp.handleRequest(p, o)
		}
	case wire.ClassResponse, wire.ClassAck:
		if qp.reliable() && (qp.state == qpstate.RTS || qp.state == qpstate.SQD) {
			qp.handleResponse(p, now)
		}
	}
}

// Progress lets the requester send what the window allows, the completer
// retire finished WQEs and the responder continue read responses.
func (qp *QP) Progress(now Clock) {
	if qp.state == qpstate.Err {
		qp.flush() // work requests posted in the error state complete at once
		return
	}
	qp.sendResponses(false)
	if qp.canSend() {
		qp.request(now)
	}
	qp.complete()
}

// Quiesce sends the acknowledgements the responder has already decided on.
// A peer's last message is placed in memory, where the application can see
// it, before its ACK leaves with the next Progress; an application that
// destroys the QP in between would leave the peer retrying a message this
// QP accepted. rxe's responder sends the ACK before the data can be seen, so
// Destroy calls Quiesce first.
func (qp *QP) Quiesce() {
	if qp.state == qpstate.RTS || qp.state == qpstate.RTR || qp.state == qpstate.SQD || qp.state == qpstate.SQE {
		qp.sendResponses(false)
	}
}

// SendQueueLen returns the number of send WQEs posted and not yet
// retired; any goroutine may call it.
func (qp *QP) SendQueueLen() int {
	head, tail := qp.cfg.SQ.bounds()
	return int(tail - head)
}

// Outstanding returns the number of send WQEs not yet completed and
// responses the responder has still to send: both 0 when the QP is idle.
func (qp *QP) Outstanding() (sends, responses int) {
	head, tail := qp.cfg.SQ.bounds()
	return int(tail - head), len(qp.resp.readQ)
}

// Busy reports whether Progress has more to do right away.
func (qp *QP) Busy() bool {
	return qp.resp.readsPending() || qp.canSend() && qp.req.ready(qp)
}

// fatal moves the QP to ERR after an error completion and tells the device.
func (qp *QP) fatal(status WCStatus) {
	if qp.state == qpstate.Err {
		return
	}
	qp.SetState(qpstate.Err)
	qp.env.Fatal(qp, status)
}

// flush completes every outstanding send WQE and every receive WQE of the
// QP's own receive queue with WR_FLUSH_ERR (IBA 10.3.1: the error state).
func (qp *QP) flush() {
	sq := qp.cfg.SQ
	head, tail := sq.bounds()
	for i := head; i != tail; i++ {
		w := sq.slot(i)
		qp.cfg.SendCQ.Push(WC{WRID: w.wr.WRID, Status: WCWRFlushErr, Opcode: wcOpcodeOf(w.wr.Opcode), QPNum: qp.cfg.QPN}, false)
	}
	sq.retire(tail)
	qp.req.wqe, qp.comp.wqe = tail, tail
	qp.req.rdAtomicOut = 0
	qp.giveBackAll()
	if qp.resp.haveRecv {
		qp.resp.haveRecv = false
		qp.cfg.RecvCQ.Push(WC{WRID: qp.resp.recv.wrid, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: qp.cfg.QPN}, false)
	}
	if !qp.cfg.SRQ {
		qp.cfg.RQ.drain(func(wrid uint64) {
			qp.cfg.RecvCQ.Push(WC{WRID: wrid, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: qp.cfg.QPN}, false)
		})
	}
	qp.resp.readQ = qp.resp.readQ[:0]
}

func wcOpcodeOf(o WROpcode) WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAndAdd:
		return WCFetchAdd
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	}
	return WCSend
}

// emit hands a built packet to the device, addressed to the peer.
func (qp *QP) emit(b []byte) {
	qp.env.Emit(link.Packet{Buf: b, Peer: qp.path.Peer, SrcPort: qp.path.SrcPort})
}

// emitGather builds a packet with headers h whose payload stays where it
// lies in registered memory (link.Packet.Payload) and emits it.
func (qp *QP) emitGather(h *wire.Headers, payload []byte) {
	b, split := wire.BuildGather(qp.env.Buffer(), h, len(payload))
	qp.env.Emit(link.Packet{Buf: b, Split: split, Payload: payload, Peer: qp.path.Peer, SrcPort: qp.path.SrcPort})
}

// Debug describes the QP's transport state in one line, for diagnosing a
// stuck QP (call it on the QP's worker).
func (qp *QP) Debug() string {
	head, tail := qp.cfg.SQ.bounds()
	s := fmt.Sprintf("%v req{psn %#x max %#x wqe %d off %d rdat %d rnr %v cwnd %d/%d} comp{psn %#x wqe %d deadline %v retries %d/%d retrying %v} resp{psn %#x msn %d nak %v q %d recv %v} sq[%d,%d)",
		qp.state, uint32(qp.req.psn), uint32(qp.req.maxPSN), qp.req.wqe, qp.req.offset, qp.req.rdAtomicOut, !qp.req.rnrUntil.IsZero(), qp.window(), qp.sendWindow(),
		uint32(qp.comp.psn), qp.comp.wqe, !qp.comp.deadline.IsZero(), qp.comp.retries, qp.comp.rnrRetries, qp.comp.retrying,
		uint32(qp.resp.psn), qp.resp.msn, qp.resp.nakSent, len(qp.resp.readQ), qp.resp.haveRecv, head, tail)
	for i := head; i != tail && i < head+4; i++ {
		w := qp.cfg.SQ.slot(i)
		s += fmt.Sprintf(" wqe%d{%v first %#x n %d st %v sent %v ack %v}", i, w.wr.Opcode, uint32(w.firstPSN), w.npkts, w.started, w.sent, w.acked)
	}
	return s
}
