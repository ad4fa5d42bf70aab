package transport

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/wire"
)

// splitPath turns Path.SplitWrites on for the requester a.
func splitPath(pa, _ *Path) { pa.SplitWrites = true }

// TestSplitWrites: with Path.SplitWrites, an RC RDMA WRITE of several
// packets goes as one RDMA WRITE ONLY per packet, each with a RETH for its
// own bytes (IBA 9.7.5.2.2: DMA length = payload), AckReq on the last
// only; the target receives the same bytes, and its MR counts one message
// per packet and the WR's bytes. WRITEs of one packet, WRITEs with
// immediate and SENDs keep their framing.
func TestSplitWrites(t *testing.T) {
	const mtu, n, at = 1024, 5000, 3
	h := newHarness(t, mtu, splitPath)
	fill(h.a.buf[:n], 7)
	h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, n)},
		RemoteAddr: h.b.mr.Addr() + at, RKey: h.b.mr.RKey()})
	h.deliver()
	if len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCSuccess {
		t.Fatalf("completions %+v", h.a.cq.wcs)
	}
	if len(h.sent) != 5 {
		t.Fatalf("%d packets, want 5", len(h.sent))
	}
	first := h.sent[0].BTH.PSN()
	for k, p := range h.sent {
		want := min(n-k*mtu, mtu)
		switch {
		case p.BTH.Opcode() != wire.OpWriteOnly:
			t.Errorf("packet %d: %v, want RC_RDMA_WRITE_ONLY", k, p.BTH.Opcode())
		case p.RETH == nil || p.RETH.VA() != h.b.mr.Addr()+at+uint64(k*mtu) || p.RETH.RKey() != h.b.mr.RKey() || int(p.RETH.DMALen()) != want:
			t.Errorf("packet %d: RETH %v, want VA +%d, the R_Key, length %d", k, p.RETH, at+k*mtu, want)
		case len(p.Payload) != want:
			t.Errorf("packet %d: %d bytes of payload, want %d", k, len(p.Payload), want)
		case p.BTH.PSN() != first+uint32(k):
			t.Errorf("packet %d: PSN %#x, want %#x", k, p.BTH.PSN(), first+uint32(k))
		case p.BTH.AckReq() != (k == 4):
			t.Errorf("packet %d: AckReq %v", k, p.BTH.AckReq())
		}
	}
	if !bytes.Equal(h.b.buf[at:at+n], h.a.buf[:n]) || h.b.buf[at-1] != 0 || h.b.buf[at+n] != 0 {
		t.Error("target differs from source")
	}
	if w, b := h.b.mr.RemoteWrites(), h.b.mr.RemoteWriteBytes(); w != 5 || b != n {
		t.Errorf("RemoteWrites %d, RemoteWriteBytes %d; want 5 and %d", w, b, n)
	}

	// These keep their framing: one packet, a WRITE with immediate, a SEND.
	h.sent = nil
	h.postRecv(h.b, RecvWR{WRID: 8, SGL: []memory.SGE{h.b.sge(1<<16, n)}}, RecvWR{WRID: 9})
	h.post(h.a,
		SendWR{WRID: 2, Opcode: WRRDMAWrite, SGL: []memory.SGE{h.a.sge(0, mtu)}, RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()},
		SendWR{WRID: 3, Opcode: WRSend, SGL: []memory.SGE{h.a.sge(0, n)}},
		SendWR{WRID: 4, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, n)},
			RemoteAddr: h.b.mr.Addr() + 1<<17, RKey: h.b.mr.RKey(), Imm: 0x1234})
	h.deliver()
	var ops []string
	for _, p := range h.sent {
		ops = append(ops, p.BTH.Opcode().String())
	}
	want := []string{"RC_RDMA_WRITE_ONLY",
		"RC_SEND_FIRST", "RC_SEND_MIDDLE", "RC_SEND_MIDDLE", "RC_SEND_MIDDLE", "RC_SEND_LAST",
		"RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE"}
	if len(ops) != len(want) || fmtOps(ops) != fmtOps(want) {
		t.Errorf("sent %v, want %v", ops, want)
	}
	if wcs := h.b.cq.wcs; len(wcs) != 2 || wcs[1].Opcode != WCRecvRDMAWithImm || wcs[1].ByteLen != n {
		t.Errorf("responder's completions %+v, want the SEND's and the WRITE with immediate's, %d bytes", wcs, n)
	}
}

func fmtOps(ops []string) string {
	var b bytes.Buffer
	for _, o := range ops {
		b.WriteString(o + " ")
	}
	return b.String()
}

// TestSplitWritesLoss: a split WRITE that loses a packet is resent
// go-back-N from that packet, each resent packet still a WRITE ONLY with
// its own RETH, and the target ends up whole.
func TestSplitWritesLoss(t *testing.T) {
	const mtu, n = 1024, 6000
	h := newHarness(t, mtu, splitPath)
	fill(h.a.buf[:n], 9)
	lost := false
	var lostPSN uint32
	h.drop = func(toB bool, p *wire.Packet) bool {
		if toB && !lost && p.RETH != nil && p.RETH.VA() == h.b.mr.Addr()+2*mtu {
			lost, lostPSN = true, p.BTH.PSN()
			return true
		}
		return false
	}
	h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, n)},
		RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
	h.deliver()
	for len(h.a.cq.wcs) == 0 {
		h.advance()
		h.deliver()
	}
	if !lost || h.a.cq.wcs[0].Status != WCSuccess {
		t.Fatalf("lost %v, completions %+v", lost, h.a.cq.wcs)
	}
	resent := 0
	for _, p := range h.sent[6:] {
		if p.BTH.Opcode() != wire.OpWriteOnly || p.RETH.VA() != h.b.mr.Addr()+uint64(p.BTH.PSN()-lostPSN+2)*mtu {
			t.Errorf("resent %v PSN %#x RETH %v", p.BTH.Opcode(), p.BTH.PSN(), p.RETH)
		}
		resent++
	}
	if resent == 0 {
		t.Error("nothing resent")
	}
	if !bytes.Equal(h.b.buf[:n], h.a.buf[:n]) {
		t.Error("target differs from source")
	}
	if b := h.b.mr.RemoteWriteBytes(); b != n {
		t.Errorf("RemoteWriteBytes %d, want %d: a duplicate counted or a packet missed", b, n)
	}
}

// TestSplitWritesAccess: a split WRITE whose range runs past the end of
// the target region fails with a remote access error at the first packet
// that does; the packets before it, each inside the region, are placed,
// and nothing outside the region is touched.
func TestSplitWritesAccess(t *testing.T) {
	const mtu = 1024
	h := newHarness(t, mtu, splitPath)
	size := len(h.b.buf)
	fill(h.a.buf[:3*mtu], 5)
	at := size - 2*mtu - 100 // the third packet ends 100 bytes past the region
	h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, 3*mtu)},
		RemoteAddr: h.b.mr.Addr() + uint64(at), RKey: h.b.mr.RKey()})
	h.deliver()
	if len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCRemAccessErr {
		t.Fatalf("completions %+v, want one remote access error", h.a.cq.wcs)
	}
	if !bytes.Equal(h.b.buf[at:at+2*mtu], h.a.buf[:2*mtu]) {
		t.Error("the two packets inside the region were not placed")
	}
	if tail := h.b.buf[at+2*mtu:]; !bytes.Equal(tail, make([]byte, len(tail))) {
		t.Error("the packet that failed its check wrote into the region")
	}
}

// TestWriteCountsBeforeAck: the WRITEs the responder placed are counted in
// their regions (MR.RemoteWrites) before an ACK of them leaves (each ACK's
// MSN is at most the WRITEs counted) and before a WRITE with immediate
// completes, and WRITEs that alternate between two regions, split or not,
// are each counted in theirs.
func TestWriteCountsBeforeAck(t *testing.T) {
	const mtu = 1024
	h := newHarness(t, mtu, splitPath)
	buf2 := make([]byte, 1<<16)
	mr2, err := h.b.mem.Register(testPD, buf2, memory.AccessLocalWrite|memory.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	counted := func() uint64 { return h.b.mr.RemoteWrites() + mr2.RemoteWrites() }
	acks := 0
	h.b.env.onEmit = func(p link.Packet) {
		var pkt wire.Packet
		if err := pkt.Parse(p.Buf); err != nil || pkt.AETH == nil {
			return
		}
		acks++
		if msn := uint64(pkt.AETH.MSN()); msn > counted() {
			t.Errorf("an ACK of MSN %d left with %d WRITEs counted", msn, counted())
		}
	}
	h.b.cq.onPush = func(wc WC) {
		if wc.Opcode == WCRecvRDMAWithImm && mr2.RemoteWriteBytes() != 5000 {
			t.Errorf("the WRITE with immediate completed with %d bytes counted in its region, want 5000 (its own 2000 too)", mr2.RemoteWriteBytes())
		}
	}
	h.postRecv(h.b, RecvWR{WRID: 9})
	h.post(h.a,
		SendWR{WRID: 1, Opcode: WRRDMAWrite, SGL: []memory.SGE{h.a.sge(0, 5000)}, RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()},
		SendWR{WRID: 2, Opcode: WRRDMAWrite, SGL: []memory.SGE{h.a.sge(0, 3000)}, RemoteAddr: mr2.Addr() + 4096, RKey: mr2.RKey()},
		SendWR{WRID: 3, Opcode: WRRDMAWrite, SGL: []memory.SGE{h.a.sge(0, 100)}, RemoteAddr: h.b.mr.Addr() + 8192, RKey: h.b.mr.RKey()},
		SendWR{WRID: 4, Opcode: WRRDMAWriteWithImm, Flags: SendSignaled, Imm: 7, SGL: []memory.SGE{h.a.sge(0, 2000)},
			RemoteAddr: mr2.Addr() + 16384, RKey: mr2.RKey()})
	h.deliver()
	if len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCSuccess {
		t.Fatalf("requester completions %+v", h.a.cq.wcs)
	}
	if acks == 0 {
		t.Fatal("no ACK seen")
	}
	// 5 + 1 WRITE_ONLYs in the first region, 3 in the second and the
	// WRITE with immediate, which keeps its framing: one message.
	if w, b := h.b.mr.RemoteWrites(), h.b.mr.RemoteWriteBytes(); w != 6 || b != 5100 {
		t.Errorf("first region: %d WRITEs, %d bytes; want 6 and 5100", w, b)
	}
	if w, b := mr2.RemoteWrites(), mr2.RemoteWriteBytes(); w != 4 || b != 5000 {
		t.Errorf("second region: %d WRITEs, %d bytes; want 4 and 5000", w, b)
	}
}
