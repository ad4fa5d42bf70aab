package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/goroce/goroce/internal/wire"
	"github.com/goroce/goroce/verbs"
)

// Work request IDs; the pending mask is made of them.
const (
	recvWRID = 1 // PINGPONG_RECV_WRID
	sendWRID = 2 // PINGPONG_SEND_WRID
)

// pingpong is one side's verbs objects and ping-pong state (struct
// pingpong_context). One goroutine drives it.
//
// Unlike rdma-core's tools, which send from and receive into one buffer,
// the region is split in two: SENDs go out of the first half and RECVs
// land in the second. The bytes on the wire are the same; the split lets
// -c poison the receive half after checking it, so a RECV that completes
// without its data arriving is caught too. On UD the receive half is 40
// bytes longer: a UD receive starts with the 40-byte GRH, which on
// RoCEv2 holds the packet's IP header (IBA 9.8; rxe and goroce's
// transport write it whether or not the sender's AH had one).
type pingpong struct {
	dev *verbs.Device
	pd  *verbs.PD
	mr  *verbs.MR
	ch  *verbs.CompChannel
	cq  *verbs.CQ
	qp  *verbs.QP
	ah  *verbs.AH // UD: the peer's address, made by connect

	kind      Kind
	grh       int    // bytes before the payload in a receive: 40 on UD, else 0
	remoteQPN uint32 // UD: the peer's QPN, for the DETH check of -c

	size      int
	rxDepth   int
	iters     int
	sendFlags verbs.SendFlags
	events    bool
	timeout   time.Duration
	chk       bool
	want      []byte // with chk: the pattern each message must carry
	sendBuf   []byte
	recvBuf   []byte

	sendWR  [1]verbs.SendWR
	recvWRs []verbs.RecvWR
	wc      [2]verbs.WC
	timer   *time.Timer

	routs      int // receives posted and not completed
	scnt, rcnt int // completed SENDs and RECVs
	pending    int // sendWRID|recvWRID: what must complete before the next SEND
}

// newPingpong opens the device and creates the PD, MR, CQ and QP, and
// moves the QP to INIT (pp_init_ctx).
func newPingpong(o *options) (p *pingpong, err error) {
	dev, err := verbs.Open(verbs.Config{Addr: o.dev, Fault: o.fault})
	if err != nil {
		return nil, fmt.Errorf("open device %v: %w", o.dev, err)
	}
	p = &pingpong{dev: dev, kind: o.kind, size: o.size, rxDepth: o.rxDepth, iters: o.iters, sendFlags: verbs.SendSignaled,
		events: o.events, timeout: o.timeout, chk: o.chk, ch: verbs.NewCompChannel(), timer: time.NewTimer(time.Hour)}
	p.timer.Stop()
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if o.kind == verbs.QPTypeUD {
		p.grh = wire.GRHLen
		// IBA C10-93.1.1 as rxe applies it: a UD message is one packet,
		// and a longer one completes without being sent; ud_pingpong
		// refuses such a size before it starts.
		if mtu := dev.QueryPort().ActiveMTU.Bytes(); o.size > mtu {
			return p, fmt.Errorf("requested size %d is larger than the port's active MTU %d: a UD message is one packet", o.size, mtu)
		}
	}
	if p.pd, err = dev.AllocPD(); err != nil {
		return p, fmt.Errorf("alloc PD: %w", err)
	}
	buf := make([]byte, 2*o.size+p.grh)
	p.sendBuf, p.recvBuf = buf[:o.size:o.size], buf[o.size:]
	if o.chk {
		p.want = make([]byte, o.size)
		fillPattern(p.want)
		copy(p.sendBuf, p.want)
		poison(p.recvBuf)
	} else {
		for i := range buf {
			buf[i] = 0x7b // as rc_pingpong's memset(buf, 0x7b, size)
		}
	}
	if p.mr, err = p.pd.RegMR(buf, verbs.AccessLocalWrite); err != nil {
		return p, fmt.Errorf("register MR: %w", err)
	}
	if p.cq, err = dev.CreateCQ(o.rxDepth+1, p.ch); err != nil {
		return p, fmt.Errorf("create CQ: %w", err)
	}
	p.qp, err = p.pd.CreateQP(verbs.QPInitAttr{Type: o.kind, SendCQ: p.cq, RecvCQ: p.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: o.rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return p, fmt.Errorf("create QP: %w", err)
	}
	if _, init := p.qp.Query(); init.Cap.MaxInlineData >= o.size {
		p.sendFlags |= verbs.SendInline
	}
	init, mask := verbs.QPAttr{State: verbs.QPSInit, PKeyIndex: 0, PortNum: uint8(o.ibPort)},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags
	if o.kind == verbs.QPTypeUD {
		// A UD QP takes a Q_Key instead of access flags at RESET→INIT
		// (IBA 10.2.5, ibv_modify_qp); ud_pingpong's is 0x11111111.
		init.QKey, mask = udQKey, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey
	}
	if err = p.qp.Modify(&init, mask); err != nil {
		return p, fmt.Errorf("QP to INIT: %w", err)
	}
	p.sendWR[0] = verbs.SendWR{WRID: sendWRID, Opcode: verbs.WRSend, Flags: p.sendFlags,
		SGL: []verbs.SGE{p.mr.SGE(0, o.size)}}
	p.recvWRs = make([]verbs.RecvWR, o.rxDepth)
	sge := []verbs.SGE{p.mr.SGE(o.size, p.grh+o.size)}
	for i := range p.recvWRs {
		p.recvWRs[i] = verbs.RecvWR{WRID: recvWRID, SGL: sge}
	}
	return p, nil
}

// close releases everything newPingpong made (pp_close_ctx).
func (p *pingpong) close() {
	if p.qp != nil {
		p.qp.Destroy()
	}
	if p.ah != nil {
		p.ah.Destroy()
	}
	if p.cq != nil {
		p.cq.Destroy()
	}
	if p.mr != nil {
		p.mr.Dereg()
	}
	if p.pd != nil {
		p.pd.Dealloc()
	}
	p.dev.Close()
}

// connect moves the QP to RTR and RTS towards remote, with rc_pingpong's
// attributes (pp_connect_ctx). rc_pingpong leaves out the GRH when the
// peer's GID has no interface ID; RoCE cannot, so that is an error here.
func (p *pingpong) connect(o *options, myPSN uint32, remote dest) error {
	if [8]byte(remote.GID[8:]) == [8]byte{} {
		return fmt.Errorf("remote GID %s has no interface ID: RoCE needs the peer's GID (run it with -g)", ntop6(remote.GID))
	}
	switch o.kind {
	case verbs.QPTypeUC:
		return p.connectUC(o, myPSN, remote)
	case verbs.QPTypeUD:
		return p.connectUD(o, myPSN, remote)
	}
	attr := verbs.QPAttr{State: verbs.QPSRTR, PathMTU: o.mtu, DestQPN: remote.QPN, RQPSN: remote.PSN,
		MaxDestRdAtomic: 1, MinRNRTimer: 12,
		AH: verbs.AHAttr{IsGlobal: true, HopLimit: 1, DGID: remote.GID, SGIDIndex: uint8(o.gidIdx),
			SL: uint8(o.sl), PortNum: uint8(o.ibPort)}}
	err := p.qp.Modify(&attr, verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|
		verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
	if err != nil {
		return fmt.Errorf("QP to RTR: %w", err)
	}
	attr.State, attr.Timeout, attr.RetryCnt, attr.RNRRetry, attr.SQPSN, attr.MaxRdAtomic = verbs.QPSRTS, 14, 7, 7, myPSN, 1
	err = p.qp.Modify(&attr, verbs.AttrState|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|
		verbs.AttrSQPSN|verbs.AttrMaxQPRdAtomic)
	if err != nil {
		return fmt.Errorf("QP to RTS: %w", err)
	}
	return nil
}

// connectUC is connect for uc_pingpong (its pp_connect_ctx): no RC
// attributes, so RTR takes the AV, path MTU, destination QPN and receive
// PSN, and RTS only the send PSN.
func (p *pingpong) connectUC(o *options, myPSN uint32, remote dest) error {
	attr := verbs.QPAttr{State: verbs.QPSRTR, PathMTU: o.mtu, DestQPN: remote.QPN, RQPSN: remote.PSN,
		AH: verbs.AHAttr{IsGlobal: true, HopLimit: 1, DGID: remote.GID, SGIDIndex: uint8(o.gidIdx),
			SL: uint8(o.sl), PortNum: uint8(o.ibPort)}}
	if err := p.qp.Modify(&attr, verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN); err != nil {
		return fmt.Errorf("QP to RTR: %w", err)
	}
	attr.State, attr.SQPSN = verbs.QPSRTS, myPSN
	if err := p.qp.Modify(&attr, verbs.AttrState|verbs.AttrSQPSN); err != nil {
		return fmt.Errorf("QP to RTS: %w", err)
	}
	return nil
}

// udQKey is the Q_Key of ud_pingpong's QPs and of every datagram they
// send.
const udQKey = 0x11111111

// connectUD is connect for ud_pingpong (its pp_connect_ctx): the QP goes
// to RTR with the state alone and to RTS with the send PSN (a UD QP has
// no peer, so ibv_modify_qp takes no path attributes for it), then an address
// handle to the peer carries what RC and UC put in the QP's AV, with
// ud_pingpong's hop limit of 64. Every SEND names the peer's QPN and the
// Q_Key.
func (p *pingpong) connectUD(o *options, myPSN uint32, remote dest) error {
	attr := verbs.QPAttr{State: verbs.QPSRTR}
	if err := p.qp.Modify(&attr, verbs.AttrState); err != nil {
		return fmt.Errorf("QP to RTR: %w", err)
	}
	attr.State, attr.SQPSN = verbs.QPSRTS, myPSN
	if err := p.qp.Modify(&attr, verbs.AttrState|verbs.AttrSQPSN); err != nil {
		return fmt.Errorf("QP to RTS: %w", err)
	}
	ah, err := p.pd.CreateAH(verbs.AHAttr{IsGlobal: true, HopLimit: 64, DGID: remote.GID,
		SGIDIndex: uint8(o.gidIdx), SL: uint8(o.sl), PortNum: uint8(o.ibPort)})
	if err != nil {
		return fmt.Errorf("create AH: %w", err)
	}
	p.ah, p.remoteQPN = ah, remote.QPN
	w := &p.sendWR[0]
	w.AH, w.RemoteQPN, w.RemoteQKey = ah, remote.QPN, udQKey
	return nil
}

// postRecv posts up to n receives and returns how many it posted
// (pp_post_recv).
func (p *pingpong) postRecv(n int) int {
	k, _ := p.qp.PostRecv(p.recvWRs[:n])
	return k
}

func (p *pingpong) postSend() error {
	if _, err := p.qp.PostSend(p.sendWR[:]); err != nil {
		return fmt.Errorf("post send: %w", err)
	}
	return nil
}

// start posts the first SEND on the client and sets pending.
func (p *pingpong) start(client bool) error {
	p.pending = recvWRID
	if client {
		if err := p.postSend(); err != nil {
			return err
		}
		p.pending |= sendWRID
	}
	return nil
}

// run completes iters SENDs and iters RECVs.
func (p *pingpong) run(ctx context.Context) error {
	for p.rcnt < p.iters || p.scnt < p.iters {
		n, err := p.wait(ctx)
		if err != nil {
			return err
		}
		for i := range n {
			if err := p.complete(&p.wc[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// complete handles one work completion (parse_single_wc): count it,
// refill the receive queue when one receive is left, and post the next
// SEND once both the last SEND and a RECV have completed.
func (p *pingpong) complete(wc *verbs.WC) error {
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("completion of wr_id %d (%s) failed: %v (%d)", wc.WRID, wrName(wc.WRID), wc.Status, wc.Status)
	}
	switch wc.WRID {
	case sendWRID:
		p.scnt++
	case recvWRID:
		if p.chk {
			if err := p.check(wc); err != nil {
				return err
			}
		}
		if p.routs--; p.routs <= 1 {
			p.routs += p.postRecv(p.rxDepth - p.routs)
			if p.routs < p.rxDepth {
				return fmt.Errorf("posted only %d of %d receives", p.routs, p.rxDepth)
			}
		}
		p.rcnt++
	default:
		return fmt.Errorf("completion with unknown wr_id %d", wc.WRID)
	}
	p.pending &^= int(wc.WRID)
	if p.scnt < p.iters && p.pending == 0 {
		if err := p.postSend(); err != nil {
			return err
		}
		p.pending = recvWRID | sendWRID
	}
	return nil
}

// spinFor is how long polling spins on an empty CQ before it sleeps.
// rc_pingpong spins without end, which suits rxe, whose work runs in the
// kernel; goroce's runs in goroutines of this process and of the peer's,
// and a spinning thread takes a processor from them: on a host of few
// CPUs pure spinning starves them, and a longer spin catches no more
// completions than this one.
// Chosen by measurement: docs/design/tuning.md#spin-for.
const spinFor = 10 * time.Microsecond

// wait returns the next one or two completions. Polling, it spins on the
// CQ for spinFor, yielding the processor between polls, then arms the CQ
// and sleeps until a completion arrives. With -e it sleeps on the
// completion channel at once and re-arms the CQ, as rc_pingpong does, and
// may return none. Either way it fails after p.timeout without a
// completion: a peer that went away shows up as an error, not a hang.
func (p *pingpong) wait(ctx context.Context) (int, error) {
	if p.events {
		if err := p.waitEvent(ctx); err != nil {
			return 0, err
		}
		if err := p.cq.ReqNotify(false); err != nil {
			return 0, fmt.Errorf("arm CQ: %w", err)
		}
		return p.cq.Poll(p.wc[:]), nil
	}
	for t0, spin := time.Now(), 1; ; spin++ {
		if n := p.cq.Poll(p.wc[:]); n > 0 {
			return n, nil
		}
		if spin%16 == 0 && time.Since(t0) > spinFor {
			break
		}
		runtime.Gosched()
	}
	// Nothing for a while: sleep until the next completion.
	for {
		if err := p.cq.ReqNotify(false); err != nil {
			return 0, fmt.Errorf("arm CQ: %w", err)
		}
		if n := p.cq.Poll(p.wc[:]); n > 0 {
			return n, nil
		}
		if err := p.waitEvent(ctx); err != nil {
			return 0, err
		}
		if n := p.cq.Poll(p.wc[:]); n > 0 {
			return n, nil
		}
	}
}

// waitEvent waits for the CQ's notification (ibv_get_cq_event).
func (p *pingpong) waitEvent(ctx context.Context) error {
	p.timer.Reset(p.timeout)
	defer p.timer.Stop()
	for {
		if cq := p.ch.TryGet(); cq != nil {
			if cq != p.cq {
				return errors.New("event for an unknown CQ")
			}
			return nil
		}
		select {
		case <-p.ch.C():
		case <-p.timer.C:
			return p.timedOut()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// lingerQuiet is how long the peer must be silent before a finished run
// closes its QP: twice the retransmission timeout connect sets (4.096 µs ×
// 2^14 = 67 ms), plus room for a fault delay. lingerMax bounds the wait.
const (
	lingerQuiet = 150 * time.Millisecond
	lingerMax   = 2 * time.Second
)

// linger keeps the QP open after the last completion until no packet has
// arrived for quiet, or for at most limit. The ACK of the last SEND each side
// received may be lost (or, with --fault, still held by the fault stage,
// which discards what it holds when the device closes); the peer's
// requester then retransmits that SEND after its timeout, and this side's
// responder must still be there to ACK the duplicate (IBA 9.7.5.1.6).
func (p *pingpong) linger(ctx context.Context, quiet, limit time.Duration) {
	tick := time.NewTicker(quiet / 10)
	defer tick.Stop()
	end := time.After(limit)
	last, since := p.dev.Counters()["rcvd_pkts"], time.Now()
	for time.Since(since) < quiet {
		select {
		case <-tick.C:
		case <-end:
			return
		case <-ctx.Done():
			return
		}
		if n := p.dev.Counters()["rcvd_pkts"]; n != last {
			last, since = n, time.Now()
		}
	}
}

// errTimeout is wrapped when no completion comes within the timeout.
var errTimeout = errors.New("timed out")

func (p *pingpong) timedOut() error {
	return fmt.Errorf("%w: no completion for %v after %d SENDs and %d RECVs of %d; is the peer gone? (see --timeout)",
		errTimeout, p.timeout, p.scnt, p.rcnt, p.iters)
}

// check validates a received message (-c) and poisons the receive buffer
// for the next one. Each message must carry the pattern the client and
// server both send, or, from an rdma-core peer, rdma-core's: 0x7b with a
// zero at the start of each page.
//
// On UD the byte count includes the 40-byte GRH before the payload, and
// the datagram must come from the peer's QP with a GRH.
func (p *pingpong) check(wc *verbs.WC) error {
	if int(wc.ByteLen) != p.grh+p.size {
		return fmt.Errorf("-c: message %d has %d bytes, want %d", p.rcnt+1, wc.ByteLen, p.grh+p.size)
	}
	if p.kind == verbs.QPTypeUD && (wc.SrcQP != p.remoteQPN || wc.Flags&verbs.WCGRH == 0) {
		return fmt.Errorf("-c: datagram %d from QP 0x%06x (GRH %t), want one from the peer's QP 0x%06x with a GRH",
			p.rcnt+1, wc.SrcQP, wc.Flags&verbs.WCGRH != 0, p.remoteQPN)
	}
	got := p.recvBuf[p.grh:]
	if !bytes.Equal(got, p.want) && !rdmaCorePattern(got) {
		i := 0
		for got[i] == p.want[i] {
			i++
		}
		return fmt.Errorf("-c: invalid data in message %d: byte %d of %d is 0x%02x, want 0x%02x",
			p.rcnt+1, i, p.size, got[i], p.want[i])
	}
	poison(p.recvBuf)
	return nil
}

// fillPattern writes -c's pattern: a hash of each byte's offset, so a
// packet's payload placed at the wrong offset shows, with a zero at the
// start of every 4 KiB page, which is what rdma-core's server checks.
func fillPattern(b []byte) {
	for i := range b {
		if i%4096 == 0 {
			b[i] = 0
		} else {
			b[i] = byte(uint32(i) * 2654435761 >> 24)
		}
	}
}

// rdmaCorePattern reports whether b is what rdma-core's rc_pingpong sends:
// 0x7b everywhere, with -c a zero at the start of each page.
func rdmaCorePattern(b []byte) bool {
	for i, c := range b {
		if c != 0x7b && (c != 0 || i%4096 != 0) {
			return false
		}
	}
	return true
}

// poison fills a receive buffer with a byte rdma-core's pattern never has
// and ours has at one offset in 256, so a message that does not arrive
// fails the check.
func poison(b []byte) {
	for i := range b {
		b[i] = 0xa5
	}
}

// wrName names a work request ID for messages.
func wrName(id uint64) string {
	switch id {
	case sendWRID:
		return "SEND"
	case recvWRID:
		return "RECV"
	}
	return "unknown"
}
