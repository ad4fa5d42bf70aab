package wire

import "encoding/binary"

// FETHLen is the length of the Flush Extended Transport Header.
const FETHLen = 4

// FETH is a view of the Flush Extended Transport Header of the IBTA Memory
// Placement Extensions (FLUSH, opcode 0x1C): a 32-bit word whose low bits
// select what is flushed and to which persistence level:
//
//	bits 5:4  selectivity level (0: the memory region range, 1: the whole MR)
//	bits 3:0  placement type (bit 0: global visibility, bit 1: persistence)
type FETH []byte

// Flush placement types and selectivity levels.
const (
	FlushGlobal     = 1 << 0 // make prior writes globally visible
	FlushPersistent = 1 << 1 // make prior writes persistent
	FlushSelRange   = 0      // flush the range named by the RETH
	FlushSelMR      = 1      // flush the whole memory region
)

func (h FETH) Word() uint32            { return binary.BigEndian.Uint32(h) }
func (h FETH) PlacementType() uint8    { return uint8(h.Word() & 0xf) }
func (h FETH) SelectivityLevel() uint8 { return uint8(h.Word()>>4) & 3 }

// Set sets the selectivity level and placement type, clearing the reserved bits.
func (h FETH) Set(sel, placement uint8) {
	binary.BigEndian.PutUint32(h, uint32(sel&3)<<4|uint32(placement&0xf))
}

// Fields returns the header's fields.
func (h FETH) Fields() FETHFields {
	return FETHFields{PlacementType: h.PlacementType(), SelectivityLevel: h.SelectivityLevel()}
}

// FETHFields are the fields of a FETH.
type FETHFields struct {
	PlacementType    uint8
	SelectivityLevel uint8
}

// Encode writes the header into b[:FETHLen].
func (f *FETHFields) Encode(b []byte) { FETH(b[:FETHLen]).Set(f.SelectivityLevel, f.PlacementType) }

// AtomicWriteLen is the payload length of an ATOMIC_WRITE request: one
// 8-byte value placed atomically at the RETH's address.
const AtomicWriteLen = 8
