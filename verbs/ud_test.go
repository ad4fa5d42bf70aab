package verbs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/qpstate"
)

const testQKey = 0x11111111

// newTypedEndpoint is newEndpoint for a UC or UD QP.
func newTypedEndpoint(t testing.TB, d *Device, typ QPType, size int) *endpoint {
	t.Helper()
	e := &endpoint{dev: d, ch: NewCompChannel()}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = d.CreateCQ(4096, e.ch); err != nil {
		t.Fatal(err)
	}
	e.buf = make([]byte, size)
	if e.mr, err = e.pd.RegMR(e.buf, AccessLocalWrite|AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	e.qp, err = e.pd.CreateQP(QPInitAttr{Type: typ, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// udUp takes a UD QP to RTS with the masks ibv_modify_qp documents.
func udUp(t testing.TB, qp *QP, qkey uint32) {
	t.Helper()
	must(t, qp.Modify(&QPAttr{State: QPSInit, PortNum: 1, QKey: qkey}, AttrState|AttrPKeyIndex|AttrPort|AttrQKey))
	must(t, qp.Modify(&QPAttr{State: QPSRTR}, AttrState))
	must(t, qp.Modify(&QPAttr{State: QPSRTS, SQPSN: 0x123}, AttrState|AttrSQPSN))
}

// ucConnect connects two UC QPs.
func ucConnect(t testing.TB, a, b *endpoint, mtu MTU, psnA, psnB uint32) {
	t.Helper()
	for _, s := range []struct {
		e, peer *endpoint
		sq, rq  uint32
	}{{a, b, psnA, psnB}, {b, a, psnB, psnA}} {
		qp := s.e.qp
		must(t, qp.Modify(&QPAttr{State: QPSInit, PortNum: 1, AccessFlags: AccessLocalWrite | AccessRemoteWrite},
			AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
		ah := AHAttr{IsGlobal: true, DGID: GIDFromAddr(s.peer.dev.Addr().Addr()), SGIDIndex: uint8(s.e.dev.GIDIndex())}
		must(t, qp.Modify(&QPAttr{State: QPSRTR, PathMTU: mtu, DestQPN: s.peer.qp.QPN(), RQPSN: s.rq, AH: ah},
			AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN))
		must(t, qp.Modify(&QPAttr{State: QPSRTS, SQPSN: s.sq}, AttrState|AttrSQPSN))
	}
}

func createAH(t testing.TB, e *endpoint, to netip.Addr) *AH {
	t.Helper()
	ah, err := e.pd.CreateAH(AHAttr{IsGlobal: true, DGID: GIDFromAddr(to), SGIDIndex: uint8(e.dev.GIDIndex()), HopLimit: 1})
	must(t, err)
	return ah
}

func TestUDSendRecvDevices(t *testing.T) {
	for _, lk := range links {
		t.Run(lk.name, func(t *testing.T) {
			da, db := lk.open(t)
			a, b := newTypedEndpoint(t, da, QPTypeUD, 1<<16), newTypedEndpoint(t, db, QPTypeUD, 1<<16)
			udUp(t, a.qp, 0x22222222)
			udUp(t, b.qp, testQKey)
			ah := createAH(t, a, db.Addr().Addr())
			mtu := da.QueryPort().ActiveMTU.Bytes()
			fill(a.buf[:mtu], 5)
			for i := range 3 {
				_, err := b.qp.PostRecv([]RecvWR{{WRID: uint64(100 + i), SGL: []SGE{b.mr.SGE(i*8192, 40+mtu)}}})
				must(t, err)
			}
			ud := func(id uint64, qkey uint32, n int) SendWR {
				return SendWR{WRID: id, Opcode: WRSend, Flags: SendSignaled, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey, SGL: []SGE{a.mr.SGE(0, n)}}
			}
			wrs := []SendWR{
				ud(1, testQKey, mtu),   // arrives
				ud(2, 0x33333333, 64),  // wrong Q_Key: dropped
				ud(3, 0x80000000, 64),  // a's own Q_Key 0x22222222: dropped
				ud(4, testQKey, mtu+1), // longer than the MTU: completes, never sent
				ud(5, testQKey, 7),     // arrives
			}
			wrs[4].Opcode, wrs[4].Imm = WRSendWithImm, 0xfeed
			_, err := a.qp.PostSend(wrs)
			must(t, err)
			must(t, ah.Destroy()) // posted work requests keep their destination
			for _, wc := range wait(t, a.cq, 5) {
				if wc.Status != WCSuccess || wc.Opcode != WCSend {
					t.Errorf("send WC %+v; want SUCCESS", wc)
				}
			}
			r := wait(t, b.cq, 2)
			time.Sleep(20 * time.Millisecond)
			if n := b.cq.Poll(make([]WC, 4)); n != 0 {
				t.Errorf("%d more receive completions; want the Q_Key mismatches dropped", n)
			}
			if w := r[0]; w.WRID != 100 || w.ByteLen != uint32(40+mtu) || w.SrcQP != a.qp.QPN() || w.Flags != WCGRH || w.QPNum != b.qp.QPN() {
				t.Errorf("recv WC %+v; want WRID 100, %d bytes, src QP %#x, GRH", w, 40+mtu, a.qp.QPN())
			}
			if w := r[1]; w.WRID != 101 || w.ByteLen != 47 || w.Flags != WCGRH|WCWithImm || w.Imm != 0xfeed {
				t.Errorf("recv WC %+v; want WRID 101, 47 bytes, GRH|IMM", w)
			}
			settle(db)
			g := b.buf[:40]
			src, dst := da.Addr().Addr().As4(), db.Addr().Addr().As4()
			if !bytes.Equal(g[:20], make([]byte, 20)) || g[20] != 0x45 || !bytes.Equal(g[32:36], src[:]) || !bytes.Equal(g[36:40], dst[:]) {
				t.Errorf("GRH % x; want 20 zero bytes and the IPv4 header %v → %v", g, da.Addr().Addr(), db.Addr().Addr())
			}
			// The IPv4 total length covers IP, UDP, BTH, DETH, payload and ICRC.
			if tot := binary.BigEndian.Uint16(g[22:]); int(tot) != 20+8+12+8+mtu+4 {
				t.Errorf("IPv4 total length %d; want %d", tot, 20+8+12+8+mtu+4)
			}
			if !bytes.Equal(b.buf[40:40+mtu], a.buf[:mtu]) {
				t.Error("payload differs")
			}
		})
	}
}

func TestUDStateMachine(t *testing.T) {
	da, _ := newDevices(t)
	a := newTypedEndpoint(t, da, QPTypeUD, 4096)
	err := a.qp.Modify(&QPAttr{State: QPSInit, PortNum: 1}, AttrState|AttrPKeyIndex|AttrPort)
	if err == nil || !strings.Contains(err.Error(), "QKEY") {
		t.Errorf("RESET→INIT without QKEY: %v; want an error naming QKEY", err)
	}
	must(t, a.qp.Modify(&QPAttr{State: QPSInit, PortNum: 1, QKey: 7}, AttrState|AttrPKeyIndex|AttrPort|AttrQKey))
	if err := a.qp.Modify(&QPAttr{State: QPSRTR, PathMTU: MTU1024}, AttrState|AttrPathMTU); err == nil {
		t.Error("INIT→RTR with PATH_MTU on UD succeeded; the kernel's table allows only STATE, PKEY_INDEX, QKEY")
	}
	must(t, a.qp.Modify(&QPAttr{State: QPSRTR}, AttrState))
	if err := a.qp.Modify(&QPAttr{State: QPSRTS}, AttrState); err == nil {
		t.Error("RTR→RTS without SQ_PSN succeeded")
	}
	must(t, a.qp.Modify(&QPAttr{State: QPSRTS, SQPSN: 1}, AttrState|AttrSQPSN))
	var te *qpstate.TransitionError
	if err := a.qp.Modify(&QPAttr{State: QPSRTS, Timeout: 3}, AttrState|AttrTimeout); !errors.As(err, &te) {
		t.Errorf("RTS→RTS with TIMEOUT: %v; want a transition error", err)
	}
	// Work requests a UD QP refuses.
	if _, err := a.qp.PostSend([]SendWR{{Opcode: WRRDMAWrite, AH: &AH{}}}); err == nil {
		t.Error("RDMA WRITE on UD accepted")
	}
	if _, err := a.qp.PostSend([]SendWR{{Opcode: WRSend}}); err == nil || !strings.Contains(err.Error(), "address handle") {
		t.Errorf("UD SEND without AH: %v; want an error about the address handle", err)
	}
	if _, err := a.pd.CreateAH(AHAttr{DGID: GIDFromAddr(netip.MustParseAddr("198.18.0.2"))}); err == nil || !strings.Contains(err.Error(), "GRH") {
		t.Errorf("AH without GRH: %v; want an error", err)
	}
	if _, err := a.pd.CreateAH(AHAttr{IsGlobal: true, DGID: GIDFromAddr(netip.MustParseAddr("fd00::1"))}); err == nil {
		t.Error("AH of the wrong family accepted")
	}
	if err := a.qp.AttachMcast(GIDFromAddr(netip.MustParseAddr("198.18.0.2")), 0); err == nil {
		t.Error("attaching to a unicast GID succeeded")
	}
}

// TestUCDropInMessageDevices: UC SENDs and RDMA WRITEs with immediate over
// real UDP, with the fault stage dropping one packet in the middle of the
// second of three messages: exactly that message is lost.
func TestUCDropInMessageDevices(t *testing.T) {
	for _, op := range []WROpcode{WRSend, WRRDMAWriteWithImm} {
		t.Run(op.String(), func(t *testing.T) {
			const psnA, psnB, size = 0x1000, 0x2000, 2500 // 3 packets at MTU 1024
			n := udpHost.Add(2)
			ca := Config{Addr: netip.AddrFrom4([4]byte{127, 0, 1, byte(n - 1)}), Fault: fmt.Sprintf("rule=drop:psn=%#x:once", psnA+4)}
			cb := Config{Addr: netip.AddrFrom4([4]byte{127, 0, 1, byte(n)})}
			da, db := openPair(t, ca, cb)
			a, b := newTypedEndpoint(t, da, QPTypeUC, 1<<16), newTypedEndpoint(t, db, QPTypeUC, 1<<16)
			ucConnect(t, a, b, MTU1024, psnA, psnB)
			fill(a.buf[:3*size], 9)
			for i := range 3 {
				_, err := b.qp.PostRecv([]RecvWR{{WRID: uint64(100 + i), SGL: []SGE{b.mr.SGE(i*4096, 4096)}}})
				must(t, err)
			}
			for i := range 3 {
				wr := SendWR{WRID: uint64(i), Opcode: op, Flags: SendSignaled, Imm: uint32(i), SGL: []SGE{a.mr.SGE(i*size, size)}}
				if op == WRRDMAWriteWithImm {
					wr.RemoteAddr, wr.RKey = b.mr.Addr()+uint64(0x8000+i*4096), b.mr.RKey()
				}
				_, err := a.qp.PostSend([]SendWR{wr})
				must(t, err)
			}
			for _, wc := range wait(t, a.cq, 3) {
				if wc.Status != WCSuccess {
					t.Errorf("send WC %+v", wc)
				}
			}
			r := wait(t, b.cq, 2)
			time.Sleep(20 * time.Millisecond)
			if k := b.cq.Poll(make([]WC, 4)); k != 0 {
				t.Errorf("%d more receive completions; want the second message lost", k)
			}
			settle(db)
			for k, msg := range []int{0, 2} {
				if r[k].WRID != uint64(100+k) || r[k].ByteLen != size || r[k].Status != WCSuccess {
					t.Errorf("recv WC %d %+v; want message %d in WQE %d", k, r[k], msg, 100+k)
				}
				got := b.buf[k*4096 : k*4096+size]
				if op == WRRDMAWriteWithImm {
					got = b.buf[0x8000+msg*4096 : 0x8000+msg*4096+size]
					if r[k].Imm != uint32(msg) {
						t.Errorf("imm %d; want %d", r[k].Imm, msg)
					}
				}
				if !bytes.Equal(got, a.buf[msg*size:(msg+1)*size]) {
					t.Errorf("message %d differs", msg)
				}
			}
			if c := da.Counters(); c["fault_dropped"] != 1 {
				t.Errorf("fault_dropped %d; want 1", c["fault_dropped"])
			}
		})
	}
}

// TestUDMulticastThree: three devices on three loopback addresses attach
// a UD QP each to one IPv4 group; one datagram reaches all three, and a
// detached QP stops receiving.
func TestUDMulticastThree(t *testing.T) {
	group := netip.MustParseAddr("239.192.0.5")
	var eps []*endpoint
	for range 3 {
		n := udpHost.Add(1)
		d, err := Open(Config{Addr: netip.AddrFrom4([4]byte{127, 0, 1, byte(n)})})
		must(t, err)
		t.Cleanup(func() { d.Close() })
		e := newTypedEndpoint(t, d, QPTypeUD, 1<<14)
		udUp(t, e.qp, testQKey)
		if err := e.qp.AttachMcast(GIDFromAddr(group), 0); err != nil {
			t.Fatalf("member %d: %v", len(eps), err)
		}
		for i := range 4 {
			_, err := e.qp.PostRecv([]RecvWR{{WRID: uint64(i), SGL: []SGE{e.mr.SGE(i*1024, 1024)}}})
			must(t, err)
		}
		eps = append(eps, e)
	}
	sender := eps[0]
	ah := createAH(t, sender, group)
	send := func(id uint64) {
		t.Helper()
		copy(sender.buf[8192:], fmt.Sprintf("hello group %d", id))
		_, err := sender.qp.PostSend([]SendWR{{WRID: id, Opcode: WRSend, Flags: SendSignaled, AH: ah,
			RemoteQPN: 0xffffff, RemoteQKey: testQKey, SGL: []SGE{sender.mr.SGE(8192, 13)}}})
		must(t, err)
		wait(t, sender.cq, 1)
	}
	send(1)
	for i, e := range eps {
		wc := wait(t, e.cq, 1)[0] // the sender's QP is a member too
		if wc.Opcode != WCRecv || wc.SrcQP != sender.qp.QPN() || wc.ByteLen != 40+13 || wc.Flags&WCGRH == 0 {
			t.Errorf("member %d: WC %+v; want a 53-byte receive from QP %#x", i, wc, sender.qp.QPN())
		}
		settle(e.dev)
		if dst := netip.AddrFrom4([4]byte(e.buf[36:40])); dst != group {
			t.Errorf("member %d: GRH destination %v; want the group %v", i, dst, group)
		}
		if got := string(e.buf[40:53]); got != "hello group 1" {
			t.Errorf("member %d got %q", i, got)
		}
	}
	must(t, eps[2].qp.DetachMcast(GIDFromAddr(group), 0))
	if err := eps[2].qp.DetachMcast(GIDFromAddr(group), 0); err == nil {
		t.Error("detaching twice succeeded")
	}
	send(2)
	wait(t, eps[1].cq, 1)
	time.Sleep(20 * time.Millisecond)
	if k := eps[2].cq.Poll(make([]WC, 2)); k != 0 {
		t.Errorf("a detached QP got %d completions", k)
	}
}
