package verbs

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/internal/device"
	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/transport"
)

// QPCap are a QP's queue sizes (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr are a QP's creation attributes (struct ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType // QPTypeRC, QPTypeUC or QPTypeUD
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ // optional: take receive WQEs from this SRQ
	Cap    QPCap
	SigAll bool // sq_sig_all: every send WR completes with a WC
}

// AHAttr is an address vector (struct ibv_ah_attr). On RoCE the GRH is
// mandatory: IsGlobal must be set and DGID names the peer's address.
type AHAttr struct {
	DGID         GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	IsGlobal     bool
	SL           uint8
	PortNum      uint8
}

// QPAttr are the attributes modify_qp sets and query_qp returns (struct
// ibv_qp_attr). A mask says which fields a call uses.
type QPAttr struct {
	State           QPState
	CurState        QPState
	PathMTU         MTU
	QKey            uint32
	RQPSN           uint32
	SQPSN           uint32
	DestQPN         uint32
	AccessFlags     Access
	Cap             QPCap
	AH              AHAttr
	PKeyIndex       uint16
	PortNum         uint8
	Timeout         uint8 // local ACK timeout: 4.096 µs × 2^Timeout, 0 = none
	RetryCnt        uint8 // retries after a timeout, 0..7
	RNRRetry        uint8 // retries after an RNR NAK, 0..7; 7 = forever
	MinRNRTimer     uint8 // RNR NAK timer code this QP sends, 0..31
	MaxRdAtomic     uint8 // outstanding RDMA READs/atomics this QP initiates
	MaxDestRdAtomic uint8 // outstanding RDMA READs/atomics it accepts
}

// QP is a queue pair.
type QP struct {
	dev  *Device
	pd   *PD
	qpn  uint32
	init QPInitAttr
	e    *device.QP // the engine's side: transport, worker, timers

	mu    sync.Mutex    // guards attr, and state's changes
	state atomic.Uint32 // a QPState: read without mu (State, on every post)
	attr  QPAttr
}

// QPError is returned by QP verbs: it names the QP and wraps the reason.
type QPError struct {
	QPN uint32
	Op  string // "modify", "post_send", …
	Err error
}

func (e *QPError) Error() string { return fmt.Sprintf("verbs: QP 0x%x %s: %v", e.QPN, e.Op, e.Err) }
func (e *QPError) Unwrap() error { return e.Err }

// CreateQP creates a queue pair in the RESET state.
func (pd *PD) CreateQP(a QPInitAttr) (*QP, error) {
	d := pd.dev
	switch a.Type {
	case QPTypeRC, QPTypeUC, QPTypeUD:
	default:
		return nil, fmt.Errorf("verbs: create QP: type %v not supported (RC, UC and UD are)", a.Type)
	}
	if a.SendCQ == nil || a.RecvCQ == nil {
		return nil, errors.New("verbs: create QP: send and receive CQs are required")
	}
	c := &a.Cap
	switch {
	case c.MaxSendWR < 1 || c.MaxSendWR > maxQPWR:
		return nil, fmt.Errorf("verbs: create QP: max_send_wr %d outside 1..%d", c.MaxSendWR, maxQPWR)
	case a.SRQ == nil && (c.MaxRecvWR < 1 || c.MaxRecvWR > maxQPWR):
		return nil, fmt.Errorf("verbs: create QP: max_recv_wr %d outside 1..%d", c.MaxRecvWR, maxQPWR)
	case c.MaxSendSGE < 0 || c.MaxSendSGE > maxSGE || c.MaxRecvSGE < 0 || c.MaxRecvSGE > maxSGE:
		return nil, fmt.Errorf("verbs: create QP: max_send_sge %d / max_recv_sge %d outside 0..%d", c.MaxSendSGE, c.MaxRecvSGE, maxSGE)
	case c.MaxInlineData < 0 || c.MaxInlineData > maxInline:
		return nil, fmt.Errorf("verbs: create QP: max_inline_data %d outside 0..%d", c.MaxInlineData, maxInline)
	}
	if a.SRQ != nil && a.SRQ.pd != pd {
		return nil, errors.New("verbs: create QP: the SRQ belongs to another PD")
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	var rq *transport.RecvQueue
	if a.SRQ != nil {
		rq = a.SRQ.rq
	} else {
		rq = transport.NewRecvQueue(c.MaxRecvWR)
	}
	qp := &QP{dev: d, pd: pd, init: a} // state 0: RESET
	e, err := d.eng.NewQP(transport.Config{
		Type: a.Type, PD: pd.id, Mem: d.mem, SendCQ: cqSink{a.SendCQ}, RecvCQ: cqSink{a.RecvCQ},
		SQ: transport.NewSendQueue(c.MaxSendWR), RQ: rq, SRQ: a.SRQ != nil,
		SigAll: a.SigAll, MaxSGE: c.MaxSendSGE, MaxInline: c.MaxInlineData,
	}, qp.fatal)
	if errors.Is(err, device.ErrTooManyQPs) {
		return nil, fmt.Errorf("verbs: create QP: more than %d QPs", maxQP)
	}
	if err != nil {
		return nil, fmt.Errorf("verbs: create QP: %w", err)
	}
	qp.e, qp.qpn = e, e.QPN()
	return qp, nil
}

// QPN returns the QP number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// State returns the QP's current state.
func (qp *QP) State() QPState { return QPState(qp.state.Load()) }

// Query returns the QP's attributes and creation attributes (ibv_query_qp).
func (qp *QP) Query() (QPAttr, QPInitAttr) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	a := qp.attr
	a.State = QPState(qp.state.Load())
	a.CurState = a.State
	a.Cap = qp.init.Cap
	return a, qp.init
}

// Modify changes the QP's state and attributes (ibv_modify_qp). mask says
// which fields of attr to use. The transition and the attributes are
// checked as ibv_modify_qp documents them; an error names the QP, the
// transition and the attribute.
func (qp *QP) Modify(attr *QPAttr, mask AttrMask) error {
	path, next, err := qp.modifyLocked(attr, mask)
	if err != nil {
		return err
	}
	qp.e.Modify(path, next)
	return nil
}

// modifyLocked validates a modify_qp call and records the new attributes.
func (qp *QP) modifyLocked(attr *QPAttr, mask AttrMask) (transport.Path, QPState, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	var none transport.Path
	cur := QPState(qp.state.Load())
	if err := qpstate.CheckCurState(cur, mask, attr.CurState); err != nil {
		return none, cur, &QPError{qp.qpn, "modify", err}
	}
	next := qpstate.Next(cur, mask, attr.State)
	if err := qpstate.Check(qp.init.Type, cur, next, mask); err != nil {
		return none, cur, &QPError{qp.qpn, "modify", err}
	}
	if err := qp.checkValues(attr, mask); err != nil {
		return none, cur, &QPError{qp.qpn, "modify", fmt.Errorf("%v→%v: %w", cur, next, err)}
	}
	a := qp.attr
	apply(&a, attr, mask)
	if next == QPSReset {
		a = QPAttr{}
	}
	path, err := qp.path(&a)
	if err != nil && (next == QPSRTR || next == QPSRTS) {
		return none, cur, &QPError{qp.qpn, "modify", fmt.Errorf("%v→%v: %w", cur, next, err)}
	}
	qp.attr = a
	qp.state.Store(uint32(next))
	return path, next, nil
}

// checkValues checks attribute values (ibv_modify_qp's EINVAL cases).
func (qp *QP) checkValues(a *QPAttr, mask AttrMask) error {
	d := qp.dev
	bad := func(name string, v any, rule string) error {
		return fmt.Errorf("attribute %s = %v: %s", name, v, rule)
	}
	switch {
	case mask&AttrPort != 0 && a.PortNum != 1:
		return bad("PORT", a.PortNum, "the device has port 1 only")
	case mask&AttrPKeyIndex != 0 && a.PKeyIndex != 0:
		return bad("PKEY_INDEX", a.PKeyIndex, "the P_Key table has one entry")
	case mask&AttrPathMTU != 0 && (a.PathMTU.Bytes() == 0 || a.PathMTU > d.port.ActiveMTU):
		return bad("PATH_MTU", a.PathMTU, fmt.Sprintf("must be an IB MTU no larger than the port's active MTU %v", d.port.ActiveMTU))
	case mask&AttrTimeout != 0 && a.Timeout > 31:
		return bad("TIMEOUT", a.Timeout, "must be 0..31")
	case mask&AttrRetryCnt != 0 && a.RetryCnt > 7:
		return bad("RETRY_CNT", a.RetryCnt, "must be 0..7")
	case mask&AttrRNRRetry != 0 && a.RNRRetry > 7:
		return bad("RNR_RETRY", a.RNRRetry, "must be 0..7")
	case mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return bad("MIN_RNR_TIMER", a.MinRNRTimer, "must be 0..31")
	case mask&AttrMaxQPRdAtomic != 0 && int(a.MaxRdAtomic) > d.attr.MaxQPInitRdAtom:
		return bad("MAX_QP_RD_ATOMIC", a.MaxRdAtomic, fmt.Sprintf("device max is %d", d.attr.MaxQPInitRdAtom))
	case mask&AttrMaxDestRdAtomic != 0 && int(a.MaxDestRdAtomic) > d.attr.MaxQPRdAtom:
		return bad("MAX_DEST_RD_ATOMIC", a.MaxDestRdAtomic, fmt.Sprintf("device max is %d", d.attr.MaxQPRdAtom))
	case mask&AttrRQPSN != 0 && a.RQPSN > psn.Mask:
		return bad("RQ_PSN", a.RQPSN, "PSNs have 24 bits")
	case mask&AttrSQPSN != 0 && a.SQPSN > psn.Mask:
		return bad("SQ_PSN", a.SQPSN, "PSNs have 24 bits")
	case mask&AttrDestQPN != 0 && a.DestQPN > psn.Mask:
		return bad("DEST_QPN", a.DestQPN, "QPNs have 24 bits")
	case mask&AttrAccessFlags != 0 && a.AccessFlags&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic) != 0:
		return bad("ACCESS_FLAGS", a.AccessFlags, "only LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ and REMOTE_ATOMIC apply to a QP")
	}
	if mask&AttrAV != 0 {
		return d.checkAV(&a.AH)
	}
	return nil
}

// apply copies the masked fields of src into dst.
func apply(dst, src *QPAttr, mask AttrMask) {
	set := func(bit AttrMask, f func()) {
		if mask&bit != 0 {
			f()
		}
	}
	set(AttrPathMTU, func() { dst.PathMTU = src.PathMTU })
	set(AttrQKey, func() { dst.QKey = src.QKey })
	set(AttrRQPSN, func() { dst.RQPSN = src.RQPSN })
	set(AttrSQPSN, func() { dst.SQPSN = src.SQPSN })
	set(AttrDestQPN, func() { dst.DestQPN = src.DestQPN })
	set(AttrAccessFlags, func() { dst.AccessFlags = src.AccessFlags })
	set(AttrAV, func() { dst.AH = src.AH })
	set(AttrPKeyIndex, func() { dst.PKeyIndex = src.PKeyIndex })
	set(AttrPort, func() { dst.PortNum = src.PortNum })
	set(AttrTimeout, func() { dst.Timeout = src.Timeout })
	set(AttrRetryCnt, func() { dst.RetryCnt = src.RetryCnt })
	set(AttrRNRRetry, func() { dst.RNRRetry = src.RNRRetry })
	set(AttrMinRNRTimer, func() { dst.MinRNRTimer = src.MinRNRTimer })
	set(AttrMaxQPRdAtomic, func() { dst.MaxRdAtomic = src.MaxRdAtomic })
	set(AttrMaxDestRdAtomic, func() { dst.MaxDestRdAtomic = src.MaxDestRdAtomic })
}

// path turns the attributes into the transport's connection parameters.
func (qp *QP) path(a *QPAttr) (transport.Path, error) {
	p := transport.Path{
		DestQPN: a.DestQPN, MTU: a.PathMTU.Bytes(), SQPSN: psn.New(a.SQPSN), RQPSN: psn.New(a.RQPSN),
		MaxRdAtomic: int(a.MaxRdAtomic), MaxDestRdAtomic: int(a.MaxDestRdAtomic),
		Timeout: a.Timeout, RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry, MinRNRTimer: a.MinRNRTimer,
		Access: a.AccessFlags, PKey: 0xffff, SrcPort: link.FlowSourcePort(a.AH.FlowLabel, qp.qpn, a.DestQPN),
		QKey: a.QKey,
	}
	if qp.init.Type == QPTypeUD {
		// UD has no path: datagrams use the port's MTU (rxe get_mtu) and
		// the QP's fixed source port (rxe_qp_init_req).
		p.MTU, p.SrcPort = qp.dev.port.ActiveMTU.Bytes(), link.SourcePort(qp.qpn)
		return p, nil
	}
	if !a.AH.IsGlobal {
		return p, errors.New("no address vector")
	}
	peer := a.AH.DGID.Addr()
	if !peer.IsValid() {
		return p, fmt.Errorf("bad DGID %v", a.AH.DGID)
	}
	p.Peer = netip.AddrPortFrom(peer, qp.dev.cfg.Port)
	if p.MTU == 0 {
		p.MTU = 256
	}
	return p, nil
}

// PostSend posts send work requests (ibv_post_send). It returns the index
// of the first work request it rejected (len(wrs) if none) and why; none
// after it is posted. Errors a peer causes come back as completions.
func (qp *QP) PostSend(wrs []SendWR) (int, error) {
	n, err := qp.e.PostSend(wrs, qp.State())
	if err != nil {
		return n, &QPError{qp.qpn, fmt.Sprintf("post_send WR %d", n), err}
	}
	return n, nil
}

// PostRecv posts receive work requests (ibv_post_recv). It returns the
// index of the first one it rejected and why.
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	if qp.init.SRQ != nil {
		return 0, &QPError{qp.qpn, "post_recv", errors.New("the QP takes its receive WQEs from an SRQ")}
	}
	if qp.State() == QPSReset {
		return 0, &QPError{qp.qpn, "post_recv", fmt.Errorf("%w (RESET)", transport.ErrState)}
	}
	for i := range wrs {
		if len(wrs[i].SGL) > qp.init.Cap.MaxRecvSGE {
			return i, &QPError{qp.qpn, fmt.Sprintf("post_recv WR %d", i),
				fmt.Errorf("%w: %d SGEs, max_recv_sge is %d", transport.ErrTooManySGE, len(wrs[i].SGL), qp.init.Cap.MaxRecvSGE)}
		}
	}
	n, err := qp.e.PostRecv(wrs)
	if err != nil {
		return n, &QPError{qp.qpn, fmt.Sprintf("post_recv WR %d", n), err}
	}
	if qp.State() == QPSErr {
		qp.e.FlushRecv()
	}
	return n, nil
}

// Destroy destroys the QP: outstanding work requests are dropped, and the
// QPN stops receiving. It never waits for the peer.
func (qp *QP) Destroy() error {
	d := qp.dev
	d.mu.Lock()
	empty := d.detachAllLocked(qp)
	d.mu.Unlock()
	d.leaveGroups(empty)
	qp.mu.Lock()
	qp.state.Store(uint32(QPSReset))
	qp.mu.Unlock()
	qp.e.Destroy()
	return nil
}

// fatal records that the transport moved the QP to ERR.
func (qp *QP) fatal() {
	qp.mu.Lock()
	qp.state.Store(uint32(QPSErr))
	qp.mu.Unlock()
	qp.dev.event(AsyncEvent{Type: EventQPFatal, QP: qp})
}

// Debug describes the QP's transport state in one line (PSNs, queues,
// timers), for diagnosing a stuck QP.
func (qp *QP) Debug() string { return qp.e.Debug() }
