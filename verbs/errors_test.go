package verbs

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/transport"
)

// expectEvent waits for an asynchronous event of type typ.
func expectEvent(t *testing.T, d *Device, typ EventType) AsyncEvent {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-d.Events():
			if ev.Type == typ {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event", typ)
		}
	}
}

func waitState(t *testing.T, qp *QP, s QPState) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for qp.State() != s {
		if time.Now().After(deadline) {
			t.Fatalf("QP 0x%x in %v, want %v", qp.QPN(), qp.State(), s)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestLocalProtectionError: a bad lkey fails that WR with LOC_PROT_ERR
// after the earlier WR completed; the QP moves to ERR and later WRs flush.
func TestLocalProtectionError(t *testing.T) {
	a, b := pair(t, 4096, MTU1024)
	_, err := b.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{b.mr.SGE(0, 64)}}})
	must(t, err)
	bad := a.mr.SGE(0, 8)
	bad.LKey ^= 0x5a5a5a5a
	_, err = a.qp.PostSend([]SendWR{
		{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 8)}},
		{WRID: 2, Opcode: WRSend, SGL: []SGE{bad}},
		{WRID: 3, Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	})
	must(t, err)
	wcs := wait(t, a.cq, 3)
	want := []WCStatus{WCSuccess, WCLocProtErr, WCWRFlushErr}
	for i, wc := range wcs {
		if wc.WRID != uint64(i+1) || wc.Status != want[i] {
			t.Errorf("WC %d: WRID %d %v, want WRID %d %v", i, wc.WRID, wc.Status, i+1, want[i])
		}
	}
	waitState(t, a.qp, QPSErr)
	expectEvent(t, a.dev, EventQPFatal)
	// Posting in ERR completes at once with WR_FLUSH_ERR.
	_, err = a.qp.PostSend([]SendWR{{WRID: 4, Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 8)}}})
	must(t, err)
	if wc := wait(t, a.cq, 1)[0]; wc.WRID != 4 || wc.Status != WCWRFlushErr {
		t.Errorf("WR posted in ERR: %+v", wc)
	}
}

// TestReceiveTooSmall: the responder NAKs (invalid request), the requester
// sees REM_INV_REQ_ERR and the responder LOC_LEN_ERR; both QPs end in ERR
// and the responder's other receive WQEs flush.
func TestReceiveTooSmall(t *testing.T) {
	a, b := pair(t, 8192, MTU1024)
	_, err := b.qp.PostRecv([]RecvWR{{WRID: 10, SGL: []SGE{b.mr.SGE(0, 10)}}, {WRID: 11, SGL: []SGE{b.mr.SGE(100, 10)}}})
	must(t, err)
	_, err = a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 2000)}}})
	must(t, err)
	if wc := wait(t, a.cq, 1)[0]; wc.Status != WCRemInvReqErr || wc.WRID != 1 {
		t.Errorf("requester WC %+v, want REM_INV_REQ_ERR", wc)
	}
	wcs := wait(t, b.cq, 2)
	if wcs[0].WRID != 10 || wcs[0].Status != WCLocLenErr || wcs[1].WRID != 11 || wcs[1].Status != WCWRFlushErr {
		t.Errorf("responder WCs %+v, want LOC_LEN_ERR then WR_FLUSH_ERR", wcs)
	}
	waitState(t, a.qp, QPSErr)
	waitState(t, b.qp, QPSErr)
}

// TestRemoteAccessErrors: bad R_Key, out of bounds, missing rights — the
// requester sees REM_ACCESS_ERR and not one byte of the target changes.
func TestRemoteAccessErrors(t *testing.T) {
	tests := []struct {
		name string
		wr   func(a, b *endpoint, ro *MR) SendWR
	}{
		{"write bad rkey", func(a, b *endpoint, _ *MR) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 3000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() + 1}
		}},
		{"write past the end", func(a, b *endpoint, _ *MR) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 3000)}, RemoteAddr: b.mr.Addr() + uint64(b.mr.Len()) - 2999, RKey: b.mr.RKey()}
		}},
		{"write before the start", func(a, b *endpoint, _ *MR) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 16)}, RemoteAddr: b.mr.Addr() - 1, RKey: b.mr.RKey()}
		}},
		{"write to a read-only MR", func(a, b *endpoint, ro *MR) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 16)}, RemoteAddr: ro.Addr(), RKey: ro.RKey()}
		}},
		{"read past the end", func(a, b *endpoint, _ *MR) SendWR {
			return SendWR{Opcode: WRRDMARead, SGL: []SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr() + uint64(b.mr.Len()) - 63, RKey: b.mr.RKey()}
		}},
		{"atomic on a read-only MR", func(a, b *endpoint, ro *MR) SendWR {
			return SendWR{Opcode: WRAtomicFetchAndAdd, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: ro.Addr(), RKey: ro.RKey(), CompareAdd: 1}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := pair(t, 4096, MTU1024)
			roBuf := make([]byte, 4096)
			ro, err := b.pd.RegMR(roBuf, AccessRemoteRead)
			must(t, err)
			for i := range b.buf {
				b.buf[i], roBuf[i] = 0xee, 0xee
			}
			settle(b.dev)
			wr := tt.wr(a, b, ro)
			wr.WRID, wr.Flags = 7, SendSignaled
			fill(a.buf, 1)
			_, err = a.qp.PostSend([]SendWR{wr})
			must(t, err)
			if wc := wait(t, a.cq, 1)[0]; wc.Status != WCRemAccessErr || wc.WRID != 7 {
				t.Errorf("WC %+v, want REM_ACCESS_ERR", wc)
			}
			settle(b.dev)
			if !bytes.Equal(b.buf, bytes.Repeat([]byte{0xee}, len(b.buf))) || !bytes.Equal(roBuf, bytes.Repeat([]byte{0xee}, len(roBuf))) {
				t.Error("target memory was touched")
			}
			waitState(t, a.qp, QPSErr)
			waitState(t, b.qp, QPSErr)
		})
	}
}

func TestMisalignedAtomic(t *testing.T) {
	a, b := pair(t, 4096, MTU1024)
	_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 8)},
		RemoteAddr: b.mr.Addr() + 4, RKey: b.mr.RKey()}})
	must(t, err)
	if wc := wait(t, a.cq, 1)[0]; wc.Status != WCRemInvReqErr {
		t.Errorf("WC %+v, want REM_INV_REQ_ERR", wc)
	}
}

// TestModifyErrors: every rejected modify_qp names the QP, the transition
// and the attribute.
func TestModifyErrors(t *testing.T) {
	da, _ := newDevices(t)
	e := newEndpoint(t, da, 64)
	qp := e.qp
	check := func(err error, want ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("no error, want %q", want)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not mention %q", err, w)
			}
		}
	}
	qpn := "QP 0x" + strings.TrimLeft(strings.ToLower(hex32(qp.QPN())), "0")
	check(qp.Modify(&QPAttr{State: QPSRTS}, AttrState), qpn, "RESET→RTS", "not allowed")
	check(qp.Modify(&QPAttr{State: QPSInit}, AttrState|AttrPort), qpn, "RESET→INIT", "missing attribute", "PKEY_INDEX", "ACCESS_FLAGS")
	check(qp.Modify(&QPAttr{State: QPSInit, PortNum: 2}, AttrState|AttrPort|AttrPKeyIndex|AttrAccessFlags), "PORT", "port 1")
	must(t, qp.Modify(&QPAttr{State: QPSInit, PortNum: 1}, AttrState|AttrPort|AttrPKeyIndex|AttrAccessFlags))
	full := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer
	ah := AHAttr{IsGlobal: true, DGID: GIDFromAddr(da.Addr().Addr())}
	check(qp.Modify(&QPAttr{State: QPSRTR, AH: ah, PathMTU: MTU1024}, full&^AttrDestQPN), "INIT→RTR", "missing attribute DEST_QPN")
	check(qp.Modify(&QPAttr{State: QPSRTR, AH: ah, PathMTU: MTU1024, Timeout: 3}, full|AttrTimeout), "INIT→RTR", "TIMEOUT", "not allowed")
	check(qp.Modify(&QPAttr{State: QPSRTR, AH: AHAttr{DGID: ah.DGID}, PathMTU: MTU1024}, full), "AV", "GRH")
	check(qp.Modify(&QPAttr{State: QPSRTR, AH: ah, PathMTU: 9}, full), "PATH_MTU")
	check(qp.Modify(&QPAttr{State: QPSRTR, AH: ah, PathMTU: MTU1024, RQPSN: 1 << 24}, full), "RQ_PSN", "24 bits")
	check(qp.Modify(&QPAttr{State: QPSRTR, AH: ah, PathMTU: MTU1024, MaxDestRdAtomic: 200}, full), "MAX_DEST_RD_ATOMIC")
	if qp.State() != QPSInit {
		t.Errorf("state %v after rejected modifies, want INIT", qp.State())
	}
	var te *qpstate.TransitionError
	if err := qp.Modify(&QPAttr{State: QPSSQD}, AttrState); !errors.As(err, &te) || !errors.Is(err, qpstate.ErrTransition) {
		t.Errorf("INIT→SQD: %v, want a TransitionError", err)
	}
	must(t, qp.Modify(&QPAttr{State: QPSRTR, AH: ah, PathMTU: MTU1024, DestQPN: 0x99}, full))
	if a, _ := qp.Query(); a.State != QPSRTR || a.DestQPN != 0x99 || a.PathMTU != MTU1024 {
		t.Errorf("Query after RTR: %+v", a)
	}
}

func hex32(v uint32) string {
	const digits = "0123456789abcdef"
	var b [8]byte
	for i := range b {
		b[7-i] = digits[v>>(4*i)&0xf]
	}
	return string(b[:])
}

// TestPostSendErrors: the first bad WR is reported by index and reason,
// and nothing from it on is posted.
func TestPostSendErrors(t *testing.T) {
	a, b := pair(t, 4096, MTU1024)
	big := make([]SGE, 5)
	for i := range big {
		big[i] = a.mr.SGE(i, 1)
	}
	tests := []struct {
		name string
		wrs  []SendWR
		bad  int
		err  error
	}{
		{"too many SGEs", []SendWR{{Opcode: WRSend}, {Opcode: WRSend, SGL: big}}, 1, transport.ErrTooManySGE},
		{"inline too long", []SendWR{{Opcode: WRSend, Flags: SendInline, SGL: []SGE{a.mr.SGE(0, 300)}}}, 0, transport.ErrInline},
		{"atomic with 4 bytes", []SendWR{{Opcode: WRAtomicFetchAndAdd, SGL: []SGE{a.mr.SGE(0, 4)}}}, 0, transport.ErrAtomicSGE},
		{"bind MW", []SendWR{{Opcode: 8}}, 0, transport.ErrOpcode},
	}
	for _, tt := range tests {
		n, err := a.qp.PostSend(tt.wrs)
		if n != tt.bad || !errors.Is(err, tt.err) || !strings.Contains(err.Error(), "post_send WR") {
			t.Errorf("%s: PostSend = %d, %v; want %d, %v", tt.name, n, err, tt.bad, tt.err)
		}
	}
	// The one good WR of the first case was posted and completes (unsignaled: no WC).
	_, err := b.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{b.mr.SGE(0, 64)}}})
	must(t, err)
	if wc := wait(t, b.cq, 1)[0]; wc.Status != WCSuccess || wc.ByteLen != 0 {
		t.Errorf("the WR before the bad one: %+v", wc)
	}
	// A full send queue.
	wrs := make([]SendWR, 300)
	for i := range wrs {
		wrs[i] = SendWR{Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 1)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	}
	n, err := a.qp.PostSend(wrs)
	if !errors.Is(err, transport.ErrQueueFull) || n < 1 || n > 256 {
		t.Errorf("posting 300 WRs on a 256-deep queue: %d, %v", n, err)
	}
	// A QP in RESET refuses posts.
	e := newEndpoint(t, a.dev, 64)
	if _, err := e.qp.PostSend([]SendWR{{Opcode: WRSend}}); !errors.Is(err, transport.ErrState) {
		t.Errorf("post in RESET: %v", err)
	}
}
