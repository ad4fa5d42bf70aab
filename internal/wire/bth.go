package wire

import "encoding/binary"

// BTHLen is the length of the Base Transport Header (IBA 9.2).
const BTHLen = 12

// BTH is a view of a Base Transport Header (IBA 9.2):
//
//	byte 0     OpCode
//	byte 1     SE(7) M(6) PadCnt(5:4) TVer(3:0)
//	bytes 2-3  P_Key
//	byte 4     FECN(7) BECN(6) Resv6a(5:0)   (RoCEv2; the ICRC masks this byte)
//	bytes 5-7  DestQP
//	byte 8     AckReq(7) Resv7(6:0)
//	bytes 9-11 PSN
type BTH []byte

// Header transport version and default partition key.
const (
	TVer        = 0      // IBA 9.2.4: the only defined transport header version
	DefaultPKey = 0xffff // full-membership default partition, what rxe sends
)

func (h BTH) Opcode() Opcode     { return Opcode(h[0]) }
func (h BTH) SE() bool           { return h[1]&0x80 != 0 }
func (h BTH) MigReq() bool       { return h[1]&0x40 != 0 }
func (h BTH) PadCount() int      { return int(h[1]>>4) & 3 }
func (h BTH) TVer() uint8        { return h[1] & 0x0f }
func (h BTH) PKey() uint16       { return binary.BigEndian.Uint16(h[2:]) }
func (h BTH) FECN() bool         { return h[4]&0x80 != 0 }
func (h BTH) BECN() bool         { return h[4]&0x40 != 0 }
func (h BTH) Resv6a() uint8      { return h[4] & 0x3f }
func (h BTH) DestQP() uint32     { return uint32(h[5])<<16 | uint32(h[6])<<8 | uint32(h[7]) }
func (h BTH) AckReq() bool       { return h[8]&0x80 != 0 }
func (h BTH) Resv7() uint8       { return h[8] & 0x7f }
func (h BTH) PSN() uint32        { return uint32(h[9])<<16 | uint32(h[10])<<8 | uint32(h[11]) }
func (h BTH) SetOpcode(o Opcode) { h[0] = byte(o) }
func (h BTH) SetSE(v bool)       { setBit(&h[1], 0x80, v) }
func (h BTH) SetMigReq(v bool)   { setBit(&h[1], 0x40, v) }
func (h BTH) SetPadCount(n int)  { h[1] = h[1]&^0x30 | byte(n&3)<<4 }
func (h BTH) SetTVer(v uint8)    { h[1] = h[1]&^0x0f | v&0x0f }
func (h BTH) SetPKey(k uint16)   { binary.BigEndian.PutUint16(h[2:], k) }
func (h BTH) SetFECN(v bool)     { setBit(&h[4], 0x80, v) }
func (h BTH) SetBECN(v bool)     { setBit(&h[4], 0x40, v) }
func (h BTH) SetDestQP(qpn uint32) {
	h[5], h[6], h[7] = byte(qpn>>16), byte(qpn>>8), byte(qpn)
}
func (h BTH) SetAckReq(v bool) { setBit(&h[8], 0x80, v) }
func (h BTH) SetPSN(psn uint32) {
	h[9], h[10], h[11] = byte(psn>>16), byte(psn>>8), byte(psn)
}

// Fields returns the header's fields.
func (h BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: h.Opcode(), SE: h.SE(), MigReq: h.MigReq(), PadCount: h.PadCount(),
		TVer: h.TVer(), PKey: h.PKey(), FECN: h.FECN(), BECN: h.BECN(),
		DestQP: h.DestQP(), AckReq: h.AckReq(), PSN: h.PSN(),
	}
}

// BTHFields are the fields of a BTH. The reserved bits (Resv6a, Resv7) are
// transmitted as zero (IBA 9.2: reserved fields are sent as 0).
type BTHFields struct {
	Opcode   Opcode
	SE       bool // solicited event
	MigReq   bool // migration state (APM); rxe sends 0
	PadCount int  // 0..3 pad bytes after the payload
	TVer     uint8
	PKey     uint16
	FECN     bool // forward explicit congestion notification
	BECN     bool // backward explicit congestion notification
	DestQP   uint32
	AckReq   bool
	PSN      uint32
}

// Encode writes the header into b[:BTHLen].
func (f *BTHFields) Encode(b []byte) {
	h := BTH(b[:BTHLen])
	h[0] = byte(f.Opcode)
	h[1] = byte(f.PadCount&3)<<4 | f.TVer&0x0f
	setBit(&h[1], 0x80, f.SE)
	setBit(&h[1], 0x40, f.MigReq)
	h.SetPKey(f.PKey)
	h[4] = 0
	setBit(&h[4], 0x80, f.FECN)
	setBit(&h[4], 0x40, f.BECN)
	h.SetDestQP(f.DestQP)
	h[8] = 0
	setBit(&h[8], 0x80, f.AckReq)
	h.SetPSN(f.PSN)
}

func setBit(b *byte, mask byte, v bool) {
	if v {
		*b |= mask
	} else {
		*b &^= mask
	}
}
