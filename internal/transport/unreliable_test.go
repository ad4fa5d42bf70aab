package transport

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/wire"
)

// newTypedHarness is newHarness for UC or UD QPs.
func newTypedHarness(t *testing.T, typ qpstate.Type, mtu int, edit func(pa, pb *Path)) *harness {
	h := newHarness(t, mtu, func(pa, pb *Path) {
		if typ == qpstate.UD {
			pa.QKey, pb.QKey = 0x11111111, 0x11111111
		}
		if edit != nil {
			edit(pa, pb)
		}
	})
	h.a.qp.cfg.Type, h.b.qp.cfg.Type = typ, typ
	return h
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// TestUCDropInMessage: a packet lost in the middle of a UC message costs
// exactly that message, whether the message is a SEND or an RDMA WRITE
// with immediate, and whether the lost packet is a MIDDLE or the LAST.
func TestUCDropInMessage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		op    WROpcode
		lose  int // index, within message 2, of the packet lost
		nmsgs int
	}{
		{"send middle", WRSend, 1, 3},
		{"send last", WRSend, 2, 3},
		{"send first", WRSend, 0, 3},
		{"write-imm middle", WRRDMAWriteWithImm, 1, 3},
		{"write-imm last", WRRDMAWriteWithImm, 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 700 // three packets at MTU 256
			h := newTypedHarness(t, qpstate.UC, 256, nil)
			fill(h.a.buf[:3*size], 1)
			first := psn.New(0xfffff0)
			lost := first.Add(3 + tc.lose) // message 2 starts at PSN first+3
			h.drop = func(toB bool, p *wire.Packet) bool { return toB && psn.PSN(p.BTH.PSN()) == lost }
			for i := range tc.nmsgs {
				h.postRecv(h.b, RecvWR{WRID: uint64(100 + i), SGL: []memory.SGE{h.b.sge(i*1024, 1024)}})
			}
			for i := range tc.nmsgs {
				wr := SendWR{WRID: uint64(i), Opcode: tc.op, Flags: SendSignaled, Imm: uint32(0xa0 + i),
					SGL: []memory.SGE{h.a.sge(i*size, size)}}
				if tc.op == WRRDMAWriteWithImm {
					wr.RemoteAddr, wr.RKey = h.b.mr.Addr()+uint64(0x10000+i*1024), h.b.mr.RKey()
				}
				h.post(h.a, wr)
			}
			h.deliver()
			if len(h.back) != 0 {
				t.Errorf("the UC responder sent %d packets; want none", len(h.back))
			}
			for _, p := range h.sent {
				if p.BTH.AckReq() || p.Info.Transport != wire.UC {
					t.Fatalf("packet %v AckReq %v; want UC without AckReq", p.BTH.Opcode(), p.BTH.AckReq())
				}
			}
			if got := len(h.a.cq.wcs); got != tc.nmsgs {
				t.Fatalf("sender completions %d; want %d (UC completes once sent)", got, tc.nmsgs)
			}
			// Messages 1 and 3 arrive, in the first two receive WQEs.
			wcs := h.b.cq.wcs
			if len(wcs) != tc.nmsgs-1 {
				t.Fatalf("receiver completions %+v; want %d", wcs, tc.nmsgs-1)
			}
			for k, msg := range []int{0, 2} {
				wc := wcs[k]
				if wc.Status != WCSuccess || wc.WRID != uint64(100+k) || wc.ByteLen != size || wc.Imm != uint32(0xa0+msg) && wc.Flags&WCWithImm != 0 {
					t.Errorf("completion %d = %+v; want message %d in WQE %d", k, wc, msg, 100+k)
				}
				var got []byte
				if tc.op == WRSend {
					got = h.b.buf[k*1024 : k*1024+size]
				} else {
					got = h.b.buf[0x10000+msg*1024 : 0x10000+msg*1024+size]
				}
				if !bytes.Equal(got, h.a.buf[msg*size:(msg+1)*size]) {
					t.Errorf("message %d: data differs", msg)
				}
			}
		})
	}
}

// TestUCGapAcrossMessages: after a gap, a FIRST starts a new message.
func TestUCLateFirstAfterGap(t *testing.T) {
	h := newTypedHarness(t, qpstate.UC, 256, nil)
	h.postRecv(h.b, RecvWR{WRID: 1, SGL: []memory.SGE{h.b.sge(0, 64)}})
	h.drop = func(toB bool, p *wire.Packet) bool { return toB && psn.PSN(p.BTH.PSN()) == psn.New(0xfffff0) }
	h.post(h.a, SendWR{WRID: 1, Opcode: WRSend, SGL: []memory.SGE{h.a.sge(0, 16)}}, SendWR{WRID: 2, Opcode: WRSend, SGL: []memory.SGE{h.a.sge(0, 32)}})
	h.deliver()
	if len(h.b.cq.wcs) != 1 || h.b.cq.wcs[0].ByteLen != 32 {
		t.Fatalf("receiver completions %+v; want the second message only", h.b.cq.wcs)
	}
}

// TestUCErrorsDropTheMessage: a bad R_Key or a receive buffer too small
// drops the message silently (rxe class D/E); the QP stays usable.
func TestUCErrorsDropTheMessage(t *testing.T) {
	h := newTypedHarness(t, qpstate.UC, 256, nil)
	h.postRecv(h.b, RecvWR{WRID: 1, SGL: []memory.SGE{h.b.sge(0, 16)}})
	h.post(h.a,
		SendWR{WRID: 1, Opcode: WRRDMAWrite, SGL: []memory.SGE{h.a.sge(0, 16)}, RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey() + 1},
		SendWR{WRID: 2, Opcode: WRSend, SGL: []memory.SGE{h.a.sge(0, 32)}},
		SendWR{WRID: 3, Opcode: WRSend, SGL: []memory.SGE{h.a.sge(0, 8)}})
	h.deliver()
	if len(h.b.cq.wcs) != 1 || h.b.cq.wcs[0].ByteLen != 8 || h.b.cq.wcs[0].WRID != 1 {
		t.Fatalf("receiver completions %+v; want only the third message, in WQE 1", h.b.cq.wcs)
	}
	if h.b.qp.State() != qpstate.RTS || len(h.b.env.fatal) != 0 {
		t.Errorf("receiver state %v, fatal %v; want RTS", h.b.qp.State(), h.b.env.fatal)
	}
}

// TestUDSendRecv checks the UD packet, the Q_Key rules, the GRH in the
// receive buffer and the completion.
func TestUDSendRecv(t *testing.T) {
	h := newTypedHarness(t, qpstate.UD, 1024, nil)
	from := netip.MustParseAddrPort("198.18.0.1:49999")
	to := netip.MustParseAddr("198.18.0.2")
	h.a.buf[0], h.a.buf[63] = 0xab, 0xcd
	dest := AddrDest(netip.MustParseAddrPort("198.18.0.2:4791"))
	for i := range 5 {
		h.postRecv(h.b, RecvWR{WRID: uint64(10 + i), SGL: []memory.SGE{h.b.sge(i*2048, 40+64)}})
	}
	h.post(h.a,
		SendWR{WRID: 1, Opcode: WRSendWithImm, Imm: 7, Flags: SendSignaled, AH: dest, RemoteQPN: 0x12, RemoteQKey: 0x11111111, SGL: []memory.SGE{h.a.sge(0, 64)}},
		SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, AH: dest, RemoteQPN: 0x12, RemoteQKey: 0x22222222, SGL: []memory.SGE{h.a.sge(0, 64)}},   // wrong Q_Key
		SendWR{WRID: 3, Opcode: WRSend, Flags: SendSignaled, AH: dest, RemoteQPN: 0x12, RemoteQKey: 0x80000000, SGL: []memory.SGE{h.a.sge(0, 64)}},   // own Q_Key
		SendWR{WRID: 4, Opcode: WRSend, Flags: SendSignaled, AH: dest, RemoteQPN: 0x12, RemoteQKey: 0x11111111, SGL: []memory.SGE{h.a.sge(0, 2000)}}, // > MTU
		SendWR{WRID: 5, Opcode: WRSend, Flags: SendSignaled, AH: dest, RemoteQPN: 0x12, RemoteQKey: 0x11111111, SGL: []memory.SGE{h.a.sge(0, 100)}},  // > receive buffer
	)
	h.a.qp.Progress(h)
	pkts := h.a.env.take()
	if len(pkts) != 4 {
		t.Fatalf("sent %d packets; want 4 (the message longer than the MTU is not sent)", len(pkts))
	}
	for i, p := range pkts {
		var pkt wire.Packet
		if err := pkt.Parse(p.Buf); err != nil {
			t.Fatal(err)
		}
		if p.Peer != netip.AddrPort(dest) || p.SrcPort != link.SourcePort(0x11) {
			t.Errorf("packet %d to %v from port %d; want %v from %d", i, p.Peer, p.SrcPort, netip.AddrPort(dest), link.SourcePort(0x11))
		}
		wantOp := wire.Opcode(0x64)
		if i == 0 {
			wantOp = 0x65
		}
		wantQKey := []uint32{0x11111111, 0x22222222, 0x11111111, 0x11111111}[i]
		if pkt.BTH.Opcode() != wantOp || pkt.BTH.AckReq() || pkt.BTH.DestQP() != 0x12 || pkt.DETH.SrcQP() != 0x11 || pkt.DETH.QKey() != wantQKey {
			t.Errorf("packet %d: %v AckReq %v dqp %#x DETH %+v; want %v to 0x12 from 0x11 with Q_Key %#x",
				i, pkt.BTH.Opcode(), pkt.BTH.AckReq(), pkt.BTH.DestQP(), pkt.DETH.Fields(), wantOp, wantQKey)
		}
		h.b.qp.ReceiveFrom(&pkt, Origin{Src: from, Dst: to}, h)
	}
	if len(h.a.cq.wcs) != 5 {
		t.Errorf("sender completions %d; want 5, all SUCCESS", len(h.a.cq.wcs))
	}
	for _, wc := range h.a.cq.wcs {
		if wc.Status != WCSuccess {
			t.Errorf("sender WC %+v; want SUCCESS", wc)
		}
	}
	wcs := h.b.cq.wcs
	if len(wcs) != 2 {
		t.Fatalf("receiver completions %+v; want 2", wcs)
	}
	if w := wcs[0]; w.WRID != 10 || w.ByteLen != 104 || w.SrcQP != 0x11 || w.Flags != WCGRH|WCWithImm || w.Imm != 7 {
		t.Errorf("first WC %+v; want WRID 10, 104 bytes, src QP 0x11, GRH|IMM, imm 7", w)
	}
	if w := wcs[1]; w.WRID != 11 || w.Flags != WCGRH {
		t.Errorf("second WC %+v; want WRID 11 (the datagram with the QP's own Q_Key)", w)
	}
	// The GRH: 20 zero bytes, then the IPv4 header (rxe's layout).
	g := h.b.buf[:40]
	if !bytes.Equal(g[:20], make([]byte, 20)) || g[20] != 0x45 || g[29] != 17 ||
		!bytes.Equal(g[32:36], []byte{198, 18, 0, 1}) || !bytes.Equal(g[36:40], []byte{198, 18, 0, 2}) {
		t.Errorf("GRH % x; want 20 zeros and an IPv4 header 198.18.0.1 → 198.18.0.2", g)
	}
	if tot := binary.BigEndian.Uint16(g[22:]); int(tot) != 20+8+len(pkts[0].Buf) {
		t.Errorf("IPv4 total length %d; want %d", tot, 20+8+len(pkts[0].Buf))
	}
	if ipv4Checksum(g[20:40]) != 0 {
		t.Errorf("IPv4 header checksum does not verify")
	}
	if h.b.buf[40] != 0xab || h.b.buf[40+63] != 0xcd {
		t.Errorf("payload not after the GRH")
	}
	// The datagram too long for its buffer left WQE 12 in place.
	h.post(h.a, SendWR{WRID: 6, Opcode: WRSend, AH: dest, RemoteQPN: 0x12, RemoteQKey: 0x11111111, SGL: []memory.SGE{h.a.sge(0, 8)}})
	h.a.qp.Progress(h)
	for _, p := range h.a.env.take() {
		var pkt wire.Packet
		_ = pkt.Parse(p.Buf)
		h.b.qp.ReceiveFrom(&pkt, Origin{Src: from, Dst: to}, h)
	}
	if len(h.b.cq.wcs) != 3 || h.b.cq.wcs[2].WRID != 12 {
		t.Errorf("after a short datagram: %+v; want it in WQE 12", h.b.cq.wcs)
	}
}

// TestUDIPv6NetworkHeader: for IPv6 the receive buffer starts with the
// IPv6 header, which is the GRH.
func TestUDIPv6NetworkHeader(t *testing.T) {
	var h [wire.GRHLen]byte
	putNetworkHeader(&h, Origin{Src: netip.MustParseAddrPort("[fd00::1]:5000"), Dst: netip.MustParseAddr("fd00::2")}, 100)
	g := wire.GRH(h[:])
	if g.IPVer() != 6 || g.PayLen() != 108 || g.NextHeader() != 17 ||
		netip.AddrFrom16(g.SGID()) != netip.MustParseAddr("fd00::1") || netip.AddrFrom16(g.DGID()) != netip.MustParseAddr("fd00::2") {
		t.Errorf("GRH %+v", g.Fields())
	}
}

func TestUDRejectsOtherOpcodes(t *testing.T) {
	h := newTypedHarness(t, qpstate.UD, 1024, nil)
	for _, wr := range []SendWR{
		{Opcode: WRRDMAWrite, AH: AddrDest{}},
		{Opcode: WRSend},
	} {
		if _, err := h.a.qp.PostSend([]SendWR{wr}, qpstate.RTS); err == nil {
			t.Errorf("PostSend(%v, AH %v) on UD succeeded", wr.Opcode, wr.AH)
		}
	}
}

func TestUDSendAllocs(t *testing.T) {
	h := newTypedHarness(t, qpstate.UD, 1024, nil)
	dest := AddrDest(netip.MustParseAddrPort("198.18.0.2:4791"))
	wrs := []SendWR{{Opcode: WRSend, AH: dest, RemoteQPN: 0x12, RemoteQKey: 0x11111111, SGL: []memory.SGE{h.a.sge(0, 64)}}}
	env := &reuseEnv{buf: make([]byte, 0, link.MaxPacket)}
	h.a.qp.env = env
	if n := testing.AllocsPerRun(100, func() {
		_, _ = h.a.qp.PostSend(wrs, qpstate.RTS)
		h.a.qp.Progress(h)
	}); n != 0 {
		t.Errorf("UD post and send allocate %v times; want 0", n)
	}
}

type reuseEnv struct{ buf []byte }

func (e *reuseEnv) Buffer() []byte      { return e.buf[:0] }
func (e *reuseEnv) Emit(link.Packet)    {}
func (e *reuseEnv) Fatal(*QP, WCStatus) {}
func (e *reuseEnv) Gathers() bool       { return false }
func (e *reuseEnv) Push()               {}

// TestUDNetworkHeaderUnknownDst: a packet whose destination the link did
// not report still gets a well-formed header.
func TestUDNetworkHeaderUnknownDst(t *testing.T) {
	var h [wire.GRHLen]byte
	putNetworkHeader(&h, Origin{Src: netip.MustParseAddrPort("198.18.0.1:5000")}, 100)
	if h[20] != 0x45 || ipv4Checksum(h[20:]) != 0 {
		t.Errorf("header % x", h)
	}
}
