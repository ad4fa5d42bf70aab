package transport

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/wire"
)

// TestGather: with Env.Gathers, payloads that lie in one SGE leave as
// link.Packet.Payload, a slice of the MR, and arrive as if copied: WRITEs
// (with a lost packet resent), a WRITE whose SGEs split packets (those
// packets are copied), SENDs, and READ responses from the responder.
func TestGather(t *testing.T) {
	h := newHarness(t, 256, nil)
	h.a.env.gather, h.b.env.gather = true, true
	for i := range h.a.buf {
		h.a.buf[i] = byte(i*5 + 3)
	}
	for i := range h.b.buf {
		h.b.buf[i] = byte(i*11 + 7)
	}
	lost := h.loseFirst(true, wire.OpWriteMiddle)
	const w1, w2 = 10*256 + 17, 3 * 256
	h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, w1)},
		RemoteAddr: h.b.mr.Addr() + 0x10000, RKey: h.b.mr.RKey()})
	// Two SGEs of 300 and 468 bytes: the second packet spans both.
	h.post(h.a, SendWR{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled,
		SGL:        []memory.SGE{h.a.sge(0x4000, 300), h.a.sge(0x5000, w2-300)},
		RemoteAddr: h.b.mr.Addr() + 0x20000, RKey: h.b.mr.RKey()})
	h.postRecv(h.b, RecvWR{WRID: 9, SGL: []memory.SGE{h.b.sge(0x30000, 1024)}})
	h.post(h.a, SendWR{WRID: 3, Opcode: WRSend, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0x6000, 700)}})
	h.post(h.a, SendWR{WRID: 4, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0x8000, 5*256+9)},
		RemoteAddr: h.b.mr.Addr() + 0x40000, RKey: h.b.mr.RKey()})
	want := bytes.Clone(h.b.buf[0x40000 : 0x40000+5*256+9])
	h.deliver()
	for range 20 {
		if len(h.a.cq.wcs) == 4 {
			break
		}
		h.advance()
		h.deliver()
	}
	if len(h.a.cq.wcs) != 4 {
		t.Fatalf("WCs %+v, want 4", h.a.cq.wcs)
	}
	for _, wc := range h.a.cq.wcs {
		if wc.Status != WCSuccess {
			t.Fatalf("WC %+v", wc)
		}
	}
	if !*lost {
		t.Fatal("no packet was lost")
	}
	if !bytes.Equal(h.b.buf[0x10000:0x10000+w1], h.a.buf[:w1]) {
		t.Error("WRITE 1 differs")
	}
	if !bytes.Equal(h.b.buf[0x20000:0x20000+300], h.a.buf[0x4000:0x4000+300]) ||
		!bytes.Equal(h.b.buf[0x20000+300:0x20000+w2], h.a.buf[0x5000:0x5000+w2-300]) {
		t.Error("WRITE 2 (two SGEs) differs")
	}
	if !bytes.Equal(h.b.buf[0x30000:0x30000+700], h.a.buf[0x6000:0x6000+700]) {
		t.Error("SEND differs")
	}
	if !bytes.Equal(h.a.buf[0x8000:0x8000+len(want)], want) {
		t.Error("READ differs")
	}
	// 11 + 1 resent + 3 + 3 + 6 packets with payload; the one spanning two
	// SGEs is copied.
	t.Logf("%d packets gathered", h.gathered)
	if h.gathered < 20 {
		t.Errorf("%d packets gathered, want most", h.gathered)
	}
	if len(h.b.cq.wcs) != 1 || h.b.cq.wcs[0].ByteLen != 700 {
		t.Errorf("receive WCs %+v", h.b.cq.wcs)
	}
}
