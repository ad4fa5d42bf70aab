package wire

import "encoding/binary"

// Lengths of the Immediate Data and Invalidate extended transport headers.
const (
	ImmDtLen = 4
	IETHLen  = 4
)

// ImmDt is a view of the Immediate Data header (IBA 9.3.6): four opaque
// bytes delivered in the receiver's work completion. The value is kept in
// network byte order, as ibv_wc.imm_data is.
type ImmDt []byte

func (h ImmDt) Imm() uint32     { return binary.BigEndian.Uint32(h) }
func (h ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(h, v) }

// Fields returns the header's fields.
func (h ImmDt) Fields() ImmDtFields { return ImmDtFields{Imm: h.Imm()} }

// ImmDtFields are the fields of an ImmDt header.
type ImmDtFields struct {
	Imm uint32
}

// Encode writes the header into b[:ImmDtLen].
func (f *ImmDtFields) Encode(b []byte) { ImmDt(b[:ImmDtLen]).SetImm(f.Imm) }

// IETH is a view of the Invalidate Extended Transport Header (IBA 9.3.7):
// the R_Key that SEND_WITH_INVALIDATE invalidates at the responder.
type IETH []byte

func (h IETH) RKey() uint32     { return binary.BigEndian.Uint32(h) }
func (h IETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(h, k) }

// Fields returns the header's fields.
func (h IETH) Fields() IETHFields { return IETHFields{RKey: h.RKey()} }

// IETHFields are the fields of an IETH.
type IETHFields struct {
	RKey uint32
}

// Encode writes the header into b[:IETHLen].
func (f *IETHFields) Encode(b []byte) { IETH(b[:IETHLen]).SetRKey(f.RKey) }
