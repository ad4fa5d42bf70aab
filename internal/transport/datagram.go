package transport

import (
	"encoding/binary"
	"net/netip"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// The Unreliable Datagram service (IBA 9.8, rxe's UD paths):
//
//	requester  one WQE → one SEND ONLY (or SEND ONLY WITH IMMEDIATE) packet with
//	           a DETH (Q_Key, source QP), to the AH's address, from rxe's
//	           per-QP UDP source port; complete as soon as it has gone
//	responder  check the Q_Key, take a receive WQE, write the 40-byte GRH and
//	           then the payload; anything wrong drops the datagram silently
//
// Nothing is acknowledged, resent or ordered; PSNs count packets but the
// responder does not check them (IBA 9.8, unreliable datagram).

// MulticastQPN is the destination QPN of a multicast datagram: IBA
// multicast (the permissive QPN 0xFFFFFF; rxe IB_MULTICAST_QPN), delivered
// to every QP attached to the group.
const MulticastQPN = 0xffffff

// udOpcode is the UD opcode for a SEND, with or without immediate.
func udOpcode(w *sendWQE) wire.Opcode {
	op := wire.Opcode(wire.UD)<<5 | wire.OpSendOnly
	if w.wr.Opcode == WRSendWithImm {
		op = wire.Opcode(wire.UD)<<5 | wire.OpSendOnlyImm
	}
	return op
}

// sendDatagram sends w as one UD packet and marks it done.
func (qp *QP) sendDatagram(w *sendWQE) {
	r := &qp.req
	w.firstPSN, w.npkts, w.started = r.psn, 1, true
	w.sent, w.acked = true, true
	// IBA C10-93.1.1 as rxe applies it: a UD message longer than the path
	// MTU is completed successfully and nothing is sent.
	if w.length > uint64(qp.path.MTU) {
		return
	}
	// IBA 10.2.5: a work request Q_Key with the high-order bit set means
	// "use the QP's own Q_Key".
	qkey := w.wr.RemoteQKey
	if qkey&0x80000000 != 0 {
		qkey = qp.path.QKey
	}
	h := wire.Headers{
		BTH:  wire.BTHFields{Opcode: udOpcode(w), PKey: qp.path.PKey, DestQP: w.wr.RemoteQPN, PSN: uint32(r.psn)},
		DETH: wire.DETHFields{QKey: qkey, SrcQP: qp.cfg.QPN},
	}
	h.ImmDt.Imm = w.wr.Imm
	h.BTH.SE = w.wr.Flags&SendSolicited != 0
	n := int(w.length)
	b := qp.env.Buffer()[:wire.BuildLen(h.BTH.Opcode, n)]
	hdr := h.Encode(b)
	if n > 0 {
		dst := b[hdr : hdr+n]
		if len(w.inline) > 0 {
			copy(dst, w.inline)
		} else if _, err := qp.cfg.Mem.Gather(qp.cfg.PD, w.sgl, 0, dst); err != nil {
			// IBA 10.7.3.3: a bad local key or address is a local protection error.
			w.failed = WCLocProtErr
			return
		}
	}
	wire.BTH(b).SetPadCount(wire.PadCount(n))
	clear(b[hdr+n:])
	r.psn = r.psn.Next()
	// rxe sends every packet of a UD QP from one port: link.SourcePort.
	qp.env.Emit(link.Packet{Buf: b, Peer: w.dest, SrcPort: link.SourcePort(qp.cfg.QPN)})
}

// recvDatagram delivers a UD packet (IBA 9.8.3, 10.2.5; rxe check_keys,
// send_data_in). Every failed check drops the datagram without a trace on
// the wire, as rxe's class D errors do.
func (qp *QP) recvDatagram(p *wire.Packet, o Origin) {
	r := &qp.resp
	// IBA 10.2.5 (Q_Keys; rxe check_keys): a datagram whose DETH Q_Key
	// differs from the QP's is dropped.
	if p.DETH.QKey() != qp.path.QKey {
		return
	}
	if !r.haveRecv {
		if !qp.cfg.RQ.pop(&r.recv) {
			return // no receive WQE: the datagram is lost (rxe: class D)
		}
		r.haveRecv = true
	}
	n := uint64(wire.GRHLen + len(p.Payload))
	if n > memory.TotalLength(r.recv.sgl) {
		return // too long for the buffer: dropped, the WQE waits for the next one
	}
	var grh [wire.GRHLen]byte
	putNetworkHeader(&grh, o, len(p.Raw))
	if _, err := qp.cfg.Mem.Scatter(qp.cfg.PD, r.recv.sgl, 0, grh[:]); err == nil && len(p.Payload) > 0 {
		_, err = qp.cfg.Mem.Scatter(qp.cfg.PD, r.recv.sgl, wire.GRHLen, p.Payload)
		if err != nil {
			qp.badRecvWQE()
			return
		}
	} else if err != nil {
		qp.badRecvWQE()
		return
	}
	r.haveRecv = false
	r.psn = psn.PSN(p.BTH.PSN()).Next()
	wc := WC{WRID: r.recv.wrid, Opcode: WCRecv, ByteLen: uint32(n), QPNum: qp.cfg.QPN,
		SrcQP: p.DETH.SrcQP(), Flags: WCGRH}
	if p.ImmDt != nil {
		wc.Flags, wc.Imm = wc.Flags|WCWithImm, p.ImmDt.Imm()
	}
	qp.cfg.Stats.Inc(stats.RDMARecvs)
	qp.cfg.RecvCQ.Push(wc, p.BTH.SE())
}

// badRecvWQE fails a receive WQE whose SGEs are not valid local memory:
// LOC_PROT_ERR, and the QP moves to ERR (rxe: a malformed WQE, class A).
func (qp *QP) badRecvWQE() {
	r := &qp.resp
	r.haveRecv = false
	qp.cfg.RecvCQ.Push(WC{WRID: r.recv.wrid, Status: WCLocProtErr, Opcode: WCRecv, QPNum: qp.cfg.QPN}, false)
	qp.fatal(WCLocProtErr)
}

// putNetworkHeader writes the 40 bytes a UD receive buffer starts with, as
// rxe does (build_rdma_network_hdr): for IPv6 the IPv6 header, which is a
// GRH; for IPv4 20 zero bytes and then the IPv4 header. A UDP socket does
// not show the received IP header, so it is rebuilt from what the socket
// knows: addresses and length are the packet's; TOS/traffic class and
// flow label are 0, TTL/hop limit 64, and the IPv4 ID 0 with DF set.
func putNetworkHeader(h *[wire.GRHLen]byte, o Origin, udpPayload int) {
	*h = [wire.GRHLen]byte{}
	src, dst := o.Src.Addr().Unmap(), o.Dst.Unmap()
	const udpHdr = 8
	if src.Is4() {
		ip := h[20:]
		ip[0] = 0x45 // version 4, 5 words
		binary.BigEndian.PutUint16(ip[2:], uint16(20+udpHdr+udpPayload))
		ip[6] = 0x40 // DF
		ip[8] = 64   // TTL
		ip[9] = 17   // UDP
		s4 := src.As4()
		copy(ip[12:16], s4[:])
		if dst.Is4() { // unknown (zero) stays 0.0.0.0
			d4 := dst.As4()
			copy(ip[16:20], d4[:])
		}
		binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
		return
	}
	g := wire.GRH(h[:])
	g.SetVersionClassFlow(6, 0, 0)
	g.SetPayLen(uint16(udpHdr + udpPayload))
	g.SetNextHeader(17)
	g.SetHopLimit(64)
	g.SetSGID(src.As16())
	g.SetDGID(dst.As16())
}

// ipv4Checksum is the IPv4 header checksum (RFC 791) of a 20-byte header
// whose checksum field is zero.
func ipv4Checksum(ip []byte) uint16 {
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// AddrDest implements AddressHandle for a plain address, for tests and
// internal users.
type AddrDest netip.AddrPort

// Dest returns the address.
func (d AddrDest) Dest() netip.AddrPort { return netip.AddrPort(d) }
