package wire

import (
	"errors"

	"github.com/goroce/goroce/internal/fastcrc"
)

// ICRCLen is the length of the invariant CRC that ends every RoCE packet.
const ICRCLen = 4

// Errors returned by Packet.Parse. They are fixed values, so a receiver can
// count them by kind without allocating.
var (
	ErrShort       = errors.New("wire: packet shorter than its headers and ICRC")
	ErrOpcode      = errors.New("wire: opcode not defined for RoCE")
	ErrTVer        = errors.New("wire: unsupported BTH transport header version")
	ErrAlign       = errors.New("wire: packet length is not a multiple of 4")
	ErrPad         = errors.New("wire: pad count larger than the payload")
	ErrPayload     = errors.New("wire: payload on an opcode that carries none")
	ErrAtomicWrite = errors.New("wire: ATOMIC_WRITE payload is not 8 bytes")
	ErrCNPReserved = errors.New("wire: CNP reserved block is not zero")
)

// Packet is a parsed InfiniBand transport packet: views into the bytes of a
// RoCEv2 UDP payload (BTH through ICRC). Headers the opcode does not carry
// are nil. A Packet holds no memory of its own; reuse one across packets.
type Packet struct {
	Info         *OpcodeInfo
	BTH          BTH
	DETH         DETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	FETH         FETH
	CNPReserved  []byte
	Payload      []byte // without the pad bytes
	Pad          []byte
	ICRC         []byte // the 4 ICRC bytes as on the wire (little-endian CRC-32)
	Raw          []byte // the whole packet, BTH through ICRC

	// A deferred ICRC check (DeferICRC): the CRC of the headers ahead of
	// the BTH's end, and the outcome.
	icrcSeed    uint32
	icrcPending bool
	icrcBad     bool
}

// DeferICRC marks p's ICRC as not yet checked. seed is IPFields.HeaderCRC
// of p.Raw with the fields it arrived with. The check then runs in
// CopyPayload, which places the payload in the same pass, or in CheckICRC.
// Code that acts on a packet with a pending ICRC must check it first: a
// packet with a wrong ICRC is dropped without effect (IBA 7.8.1, the
// invariant CRC; rxe_rcv drops it when rxe_icrc_check fails), so nothing
// in it may be believed before. Call it after Parse, which clears it.
func (p *Packet) DeferICRC(seed uint32) { p.icrcSeed, p.icrcPending = seed, true }

// ICRCPending reports whether p's ICRC is still to be checked.
func (p *Packet) ICRCPending() bool { return p.icrcPending }

// CheckICRC runs a pending ICRC check and reports whether the ICRC is
// right; it is true at once when none is pending.
func (p *Packet) CheckICRC() bool {
	if !p.icrcPending {
		return !p.icrcBad
	}
	p.icrcPending = false
	p.icrcBad = !CheckDeferredICRC(p.Raw, p.icrcSeed)
	return !p.icrcBad
}

// CheckDeferredICRC reports whether pkt (BTH through ICRC) carries a right
// ICRC, given seed, IPFields.HeaderCRC of pkt: Packet.CheckICRC for a
// packet not parsed.
func CheckDeferredICRC(pkt []byte, seed uint32) bool {
	return fastcrc.Update(seed, pkt[BTHLen:len(pkt)-ICRCLen]) == StoredICRC(pkt)
}

// CopyPayload copies Payload into dst, which must be at least as long, and
// reports whether the ICRC is right. A pending ICRC is checked in the same
// pass over the payload (fastcrc.UpdateCopy): a packet that is both checked
// and placed is read once. When it reports false, dst[:len(Payload)] holds
// the damaged payload; the caller drops the packet. The caller places only
// into memory the packet's (possibly damaged) headers may reach, and only
// on a path where no damage can happen in flight (see verbs: the same-host
// path).
func (p *Packet) CopyPayload(dst []byte) bool {
	if !p.icrcPending {
		copy(dst, p.Payload)
		return !p.icrcBad
	}
	p.icrcPending = false
	tail := len(p.Payload) + len(p.Pad) + ICRCLen
	c := fastcrc.Update(p.icrcSeed, p.Raw[BTHLen:len(p.Raw)-tail])
	c = fastcrc.UpdateCopy(c, dst, p.Payload)
	c = fastcrc.Update(c, p.Pad)
	p.icrcBad = c != StoredICRC(p.Raw)
	return !p.icrcBad
}

// Parse fills p from b, the UDP payload of a RoCEv2 datagram. It checks
// what the packet alone can show: a defined opcode (IBA 9.2.1), TVer 0
// (IBA 9.2: receivers drop other versions), headers and
// ICRC present, a 4-byte aligned length (IBA 9.2: the pad count makes the
// payload a multiple of 4), and a payload only where the opcode allows one.
// It does not check the ICRC, which needs the IP header (see ICRC).
// Parse does not allocate.
func (p *Packet) Parse(b []byte) error {
	*p = Packet{Raw: b}
	if len(b) < BTHLen+ICRCLen {
		return ErrShort
	}
	p.BTH = BTH(b[:BTHLen])
	info := p.BTH.Opcode().Info()
	p.Info = info
	if !info.Valid() {
		return ErrOpcode
	}
	if p.BTH.TVer() != TVer {
		return ErrTVer
	}
	if len(b) < info.HdrLen+ICRCLen {
		return ErrShort
	}
	if len(b)%4 != 0 {
		return ErrAlign
	}
	for _, h := range info.Headers[:info.NumHdrs] {
		off := info.Offset(h)
		v := b[off : off+h.Len() : off+h.Len()]
		switch h {
		case HdrDETH:
			p.DETH = v
		case HdrRETH:
			p.RETH = v
		case HdrAtomicETH:
			p.AtomicETH = v
		case HdrAETH:
			p.AETH = v
		case HdrAtomicAckETH:
			p.AtomicAckETH = v
		case HdrImmDt:
			p.ImmDt = v
		case HdrIETH:
			p.IETH = v
		case HdrFETH:
			p.FETH = v
		case HdrCNPReserved:
			p.CNPReserved = v
		}
	}
	end := len(b) - ICRCLen
	body := b[info.HdrLen:end]
	pad := p.BTH.PadCount()
	if pad > len(body) {
		return ErrPad
	}
	p.Payload = body[: len(body)-pad : len(body)-pad]
	p.Pad = body[len(body)-pad:]
	p.ICRC = b[end:]
	if !info.Payload && len(body) != 0 {
		return ErrPayload
	}
	if info.Kind == KindAtomicWrite && len(p.Payload) != AtomicWriteLen {
		return ErrAtomicWrite
	}
	return nil
}

// PadCount returns the number of pad bytes that make a payload of n bytes a
// multiple of 4 (IBA 9.2, PadCnt).
func PadCount(n int) int { return -n & 3 }

// Headers holds the fields of every header a packet may carry. Encode
// writes the BTH and those extended headers its opcode calls for.
type Headers struct {
	BTH          BTHFields
	DETH         DETHFields
	RETH         RETHFields
	AtomicETH    AtomicETHFields
	AETH         AETHFields
	AtomicAckETH AtomicAckETHFields
	ImmDt        ImmDtFields
	IETH         IETHFields
	FETH         FETHFields
}

// Headers returns the fields of every header present in the packet.
func (p *Packet) Headers() Headers {
	var h Headers
	h.BTH = p.BTH.Fields()
	if p.DETH != nil {
		h.DETH = p.DETH.Fields()
	}
	if p.RETH != nil {
		h.RETH = p.RETH.Fields()
	}
	if p.AtomicETH != nil {
		h.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AETH != nil {
		h.AETH = p.AETH.Fields()
	}
	if p.AtomicAckETH != nil {
		h.AtomicAckETH = p.AtomicAckETH.Fields()
	}
	if p.ImmDt != nil {
		h.ImmDt = p.ImmDt.Fields()
	}
	if p.IETH != nil {
		h.IETH = p.IETH.Fields()
	}
	if p.FETH != nil {
		h.FETH = p.FETH.Fields()
	}
	return h
}

// Encode writes the BTH and the extended headers of h.BTH.Opcode into b and
// returns their length (the opcode's HdrLen). b must hold that many bytes.
// Encode does not touch the pad count; Build sets it.
func (h *Headers) Encode(b []byte) int {
	info := h.BTH.Opcode.Info()
	h.BTH.Encode(b)
	for _, hdr := range info.Headers[:info.NumHdrs] {
		v := b[info.Offset(hdr):]
		switch hdr {
		case HdrDETH:
			h.DETH.Encode(v)
		case HdrRETH:
			h.RETH.Encode(v)
		case HdrAtomicETH:
			h.AtomicETH.Encode(v)
		case HdrAETH:
			h.AETH.Encode(v)
		case HdrAtomicAckETH:
			h.AtomicAckETH.Encode(v)
		case HdrImmDt:
			h.ImmDt.Encode(v)
		case HdrIETH:
			h.IETH.Encode(v)
		case HdrFETH:
			h.FETH.Encode(v)
		case HdrCNPReserved:
			clear(v[:CNPReservedLen])
		}
	}
	return info.HdrLen
}

// Build writes a whole packet into b: the headers, the payload, zero pad
// bytes with the BTH pad count set to match, and room for the ICRC, which is
// left zero for the caller to fill with PutICRC once the IP header is known.
// It returns the packet's length: HdrLen + payload + pad + ICRCLen.
func Build(b []byte, h *Headers, payload []byte) int {
	n := h.Encode(b)
	n += copy(b[n:], payload)
	pad := PadCount(len(payload))
	BTH(b).SetPadCount(pad)
	clear(b[n : n+pad+ICRCLen])
	return n + pad + ICRCLen
}

// BuildGather is Build for a payload of n bytes sent from elsewhere
// (gathered by the link): it writes the headers, pad and ICRC room into b
// (whose capacity must hold them) and returns them, with the length of the
// headers: the payload's place, between headers and pad, is left out.
func BuildGather(b []byte, h *Headers, n int) (_ []byte, hdr int) {
	pad := PadCount(n)
	b = b[:h.BTH.Opcode.Info().HdrLen+pad+ICRCLen]
	hdr = h.Encode(b)
	BTH(b).SetPadCount(pad)
	clear(b[hdr:])
	return b, hdr
}

// BuildLen returns the length Build produces for the opcode and payload length.
func BuildLen(o Opcode, payloadLen int) int {
	return o.Info().HdrLen + payloadLen + PadCount(payloadLen) + ICRCLen
}
