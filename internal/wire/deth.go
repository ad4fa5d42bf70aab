package wire

import "encoding/binary"

// DETHLen is the length of the Datagram Extended Transport Header.
const DETHLen = 8

// DETH is a view of a Datagram Extended Transport Header (IBA 9.3.2),
// carried by every UD packet:
//
//	bytes 0-3  Q_Key
//	byte  4    reserved
//	bytes 5-7  source QP
type DETH []byte

// GSIQKey is the well-known Q_Key of QP1, the general services interface
// (IBA 13.5.1.2 / 16.7.2).
const GSIQKey = 0x80010000

func (h DETH) QKey() uint32     { return binary.BigEndian.Uint32(h) }
func (h DETH) SrcQP() uint32    { return uint32(h[5])<<16 | uint32(h[6])<<8 | uint32(h[7]) }
func (h DETH) SetQKey(k uint32) { binary.BigEndian.PutUint32(h, k) }
func (h DETH) SetSrcQP(qpn uint32) {
	h[4], h[5], h[6], h[7] = 0, byte(qpn>>16), byte(qpn>>8), byte(qpn)
}

// Fields returns the header's fields.
func (h DETH) Fields() DETHFields { return DETHFields{QKey: h.QKey(), SrcQP: h.SrcQP()} }

// DETHFields are the fields of a DETH.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32
}

// Encode writes the header into b[:DETHLen].
func (f *DETHFields) Encode(b []byte) {
	h := DETH(b[:DETHLen])
	h.SetQKey(f.QKey)
	h.SetSrcQP(f.SrcQP)
}
