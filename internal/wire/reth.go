package wire

import "encoding/binary"

// RETHLen is the length of the RDMA Extended Transport Header (IBA 9.3.3).
const RETHLen = 16

// RETH is a view of an RDMA Extended Transport Header (IBA 9.3.3), carried
// by the first packet of an RDMA WRITE, by an RDMA READ request and by FLUSH:
//
//	bytes 0-7   virtual address
//	bytes 8-11  R_Key
//	bytes 12-15 DMA length
type RETH []byte

func (h RETH) VA() uint64         { return binary.BigEndian.Uint64(h[0:]) }
func (h RETH) RKey() uint32       { return binary.BigEndian.Uint32(h[8:]) }
func (h RETH) DMALen() uint32     { return binary.BigEndian.Uint32(h[12:]) }
func (h RETH) SetVA(va uint64)    { binary.BigEndian.PutUint64(h[0:], va) }
func (h RETH) SetRKey(k uint32)   { binary.BigEndian.PutUint32(h[8:], k) }
func (h RETH) SetDMALen(n uint32) { binary.BigEndian.PutUint32(h[12:], n) }
func (h RETH) Fields() RETHFields { return RETHFields{VA: h.VA(), RKey: h.RKey(), DMALen: h.DMALen()} }

// RETHFields are the fields of a RETH.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// Encode writes the header into b[:RETHLen].
func (f *RETHFields) Encode(b []byte) {
	h := RETH(b[:RETHLen])
	h.SetVA(f.VA)
	h.SetRKey(f.RKey)
	h.SetDMALen(f.DMALen)
}
