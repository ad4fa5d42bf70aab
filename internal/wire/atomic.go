package wire

import "encoding/binary"

// Lengths of the atomic headers (IBA 9.3.4, 9.3.5).
const (
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
)

// AtomicETH is a view of an Atomic Extended Transport Header (IBA 9.3.4),
// carried by CMP_SWAP and FETCH_ADD requests:
//
//	bytes 0-7   virtual address (8-byte aligned)
//	bytes 8-11  R_Key
//	bytes 12-19 swap (CMP_SWAP) or add (FETCH_ADD) data
//	bytes 20-27 compare data (CMP_SWAP only)
type AtomicETH []byte

func (h AtomicETH) VA() uint64          { return binary.BigEndian.Uint64(h[0:]) }
func (h AtomicETH) RKey() uint32        { return binary.BigEndian.Uint32(h[8:]) }
func (h AtomicETH) SwapAdd() uint64     { return binary.BigEndian.Uint64(h[12:]) }
func (h AtomicETH) Compare() uint64     { return binary.BigEndian.Uint64(h[20:]) }
func (h AtomicETH) SetVA(va uint64)     { binary.BigEndian.PutUint64(h[0:], va) }
func (h AtomicETH) SetRKey(k uint32)    { binary.BigEndian.PutUint32(h[8:], k) }
func (h AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(h[12:], v) }
func (h AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(h[20:], v) }

// Fields returns the header's fields.
func (h AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: h.VA(), RKey: h.RKey(), SwapAdd: h.SwapAdd(), Compare: h.Compare()}
}

// AtomicETHFields are the fields of an AtomicETH.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

// Encode writes the header into b[:AtomicETHLen].
func (f *AtomicETHFields) Encode(b []byte) {
	h := AtomicETH(b[:AtomicETHLen])
	h.SetVA(f.VA)
	h.SetRKey(f.RKey)
	h.SetSwapAdd(f.SwapAdd)
	h.SetCompare(f.Compare)
}

// AtomicAckETH is a view of an Atomic Acknowledge Extended Transport Header
// (IBA 9.3.5): the 8-byte value the target held before the atomic operation.
type AtomicAckETH []byte

func (h AtomicAckETH) OrigData() uint64     { return binary.BigEndian.Uint64(h) }
func (h AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(h, v) }

// Fields returns the header's fields.
func (h AtomicAckETH) Fields() AtomicAckETHFields { return AtomicAckETHFields{OrigData: h.OrigData()} }

// AtomicAckETHFields are the fields of an AtomicAckETH.
type AtomicAckETHFields struct {
	OrigData uint64
}

// Encode writes the header into b[:AtomicAckETHLen].
func (f *AtomicAckETHFields) Encode(b []byte) {
	AtomicAckETH(b[:AtomicAckETHLen]).SetOrigData(f.OrigData)
}
