package transport

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/wire"
)

// Deferred ICRC checks (wire.Packet.DeferICRC): the responder checks a
// WRITE's ICRC while it places the payload, every other packet before it
// acts on it. A damaged packet must then have no effect at all, wherever
// the damage is: it is dropped as if lost, and the requester's usual
// recovery (go-back-N, or its ACK timeout) delivers the message.

// deferredRun posts a WRITE of n bytes from a to b over a harness that
// defers ICRC checks and damages the packets damage picks (after their
// ICRC is computed), and returns the harness once everything is
// delivered, timers included.
func deferredRun(t *testing.T, n int, damage func(p *wire.Packet, b []byte) bool) *harness {
	t.Helper()
	h := newHarness(t, 256, nil)
	damaged := 0
	h.icrc = func(toB bool, b []byte) {
		var p wire.Packet
		if toB && p.Parse(b) == nil && damage(&p, b) {
			damaged++
		}
	}
	for i := range h.a.buf[:n] {
		h.a.buf[i] = byte(i*7 + 1)
	}
	h.post(h.a, SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []memory.SGE{h.a.sge(0, n)},
		RemoteAddr: h.b.mr.Addr(), RKey: h.b.mr.RKey()})
	h.deliver()
	for range 20 {
		if len(h.a.cq.wcs) > 0 {
			break
		}
		h.advance()
		h.deliver()
	}
	if damaged == 0 {
		t.Fatal("no packet was damaged")
	}
	if len(h.a.cq.wcs) != 1 || h.a.cq.wcs[0].Status != WCSuccess {
		t.Fatalf("WCs %+v, want one success", h.a.cq.wcs)
	}
	if !bytes.Equal(h.b.buf[:n], h.a.buf[:n]) {
		t.Error("the written memory differs from the source")
	}
	if h.b.qp.state != qpstate.RTS || len(h.b.env.fatal) != 0 || len(h.a.env.fatal) != 0 {
		t.Errorf("responder state %v, fatal a %v b %v", h.b.qp.state, h.a.env.fatal, h.b.env.fatal)
	}
	return h
}

// naks returns the NAK codes b sent.
func naks(h *harness) []wire.NAKCode {
	var codes []wire.NAKCode
	for _, p := range h.back {
		if p.AETH != nil && p.AETH.Type() == wire.AckTypeNAK {
			codes = append(codes, wire.NAKCode(p.AETH.Value()))
		}
	}
	return codes
}

// TestDeferredICRCWritePayload: a WRITE packet whose payload was damaged is
// placed while checked, found wrong and dropped: the PSN does not move, so
// the next packet draws a sequence NAK, just as if it had been lost.
func TestDeferredICRCWritePayload(t *testing.T) {
	once := false
	h := deferredRun(t, 10*256, func(p *wire.Packet, b []byte) bool {
		if once || p.BTH.Opcode().Op() != wire.OpWriteMiddle {
			return false
		}
		once = true
		p.Payload[100] ^= 0x10
		return true
	})
	if got := naks(h); len(got) != 1 || got[0] != wire.NAKPSNSeqError {
		t.Errorf("NAKs %v, want one PSN sequence error", got)
	}
}

// TestDeferredICRCNoEffect: damage that would make the responder answer
// with an error, or act on the packet, must not: a bad R_Key, a length
// that does not fit, a PSN ahead, an opcode out of sequence. Each damaged
// packet is dropped silently, and the requester's ACK timeout resends it.
func TestDeferredICRCNoEffect(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(p *wire.Packet, b []byte)
	}{
		{"rkey", func(p *wire.Packet, b []byte) { p.RETH[11] ^= 0x40 }},
		{"length", func(p *wire.Packet, b []byte) { p.RETH[13] ^= 0x01 }},
		{"psn-ahead", func(p *wire.Packet, b []byte) { b[11] += 3 }},
		{"opcode", func(p *wire.Packet, b []byte) { b[0] = byte(wire.OpWriteMiddle) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			once := false
			h := deferredRun(t, 200, func(p *wire.Packet, b []byte) bool {
				if once || p.BTH.Opcode().Op() != wire.OpWriteOnly {
					return false
				}
				once = true
				tc.damage(p, b)
				return true
			})
			if got := naks(h); len(got) != 0 {
				t.Errorf("NAKs %v for a damaged packet, want none", got)
			}
		})
	}
}
