package wire

import "encoding/binary"

// GRHLen is the length of the Global Route Header.
const GRHLen = 40

// NextHeaderIBA is the GRH next-header value for an IBA transport header
// (IBA 8.3.1); RoCEv1 frames carry it after the GRH.
const NextHeaderIBA = 0x1b

// GRH is a view of a Global Route Header (IBA 8.3), laid out like an IPv6
// header. RoCEv1 carries it on the wire; on RoCEv2 it appears only in the
// first 40 bytes of a UD receive buffer, where verbs applications expect it:
//
//	byte 0-3    IPVer(31:28) TClass(27:20) FlowLabel(19:0)
//	bytes 4-5   PayLen
//	byte 6      NxtHdr
//	byte 7      HopLmt
//	bytes 8-23  SGID
//	bytes 24-39 DGID
type GRH []byte

func (h GRH) IPVer() uint8          { return h[0] >> 4 }
func (h GRH) TClass() uint8         { return h[0]<<4 | h[1]>>4 }
func (h GRH) FlowLabel() uint32     { return binary.BigEndian.Uint32(h[0:]) & 0xfffff }
func (h GRH) PayLen() uint16        { return binary.BigEndian.Uint16(h[4:]) }
func (h GRH) NextHeader() uint8     { return h[6] }
func (h GRH) HopLimit() uint8       { return h[7] }
func (h GRH) SGID() (g [16]byte)    { copy(g[:], h[8:24]); return g }
func (h GRH) DGID() (g [16]byte)    { copy(g[:], h[24:40]); return g }
func (h GRH) SetPayLen(n uint16)    { binary.BigEndian.PutUint16(h[4:], n) }
func (h GRH) SetNextHeader(v uint8) { h[6] = v }
func (h GRH) SetHopLimit(v uint8)   { h[7] = v }
func (h GRH) SetSGID(g [16]byte)    { copy(h[8:24], g[:]) }
func (h GRH) SetDGID(g [16]byte)    { copy(h[24:40], g[:]) }

// SetVersionClassFlow sets the first word: IP version, traffic class and
// flow label.
func (h GRH) SetVersionClassFlow(ver, tclass uint8, flow uint32) {
	binary.BigEndian.PutUint32(h[0:], uint32(ver&0xf)<<28|uint32(tclass)<<20|flow&0xfffff)
}

// Fields returns the header's fields.
func (h GRH) Fields() GRHFields {
	return GRHFields{
		IPVer: h.IPVer(), TClass: h.TClass(), FlowLabel: h.FlowLabel(), PayLen: h.PayLen(),
		NextHeader: h.NextHeader(), HopLimit: h.HopLimit(), SGID: h.SGID(), DGID: h.DGID(),
	}
}

// GRHFields are the fields of a GRH.
type GRHFields struct {
	IPVer      uint8 // 6
	TClass     uint8
	FlowLabel  uint32
	PayLen     uint16
	NextHeader uint8
	HopLimit   uint8
	SGID, DGID [16]byte
}

// Encode writes the header into b[:GRHLen].
func (f *GRHFields) Encode(b []byte) {
	h := GRH(b[:GRHLen])
	h.SetVersionClassFlow(f.IPVer, f.TClass, f.FlowLabel)
	h.SetPayLen(f.PayLen)
	h.SetNextHeader(f.NextHeader)
	h.SetHopLimit(f.HopLimit)
	h.SetSGID(f.SGID)
	h.SetDGID(f.DGID)
}
