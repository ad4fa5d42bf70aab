package wire

import "fmt"

// Opcode is the BTH OpCode (IBA 9.2.1): the top three bits name the
// transport, the low five the operation.
type Opcode uint8

// Transport is the transport service an opcode belongs to (IBA 9.2.1).
type Transport uint8

const (
	RC   Transport = 0 // reliable connection
	UC   Transport = 1 // unreliable connection
	RD   Transport = 2 // reliable datagram (not carried by RoCE stacks)
	UD   Transport = 3 // unreliable datagram
	CNP  Transport = 4 // congestion notification (RoCEv2, IBA Annex A17.9.3)
	XRC  Transport = 5 // extended reliable connection
	none Transport = 8
)

var transportNames = [...]string{"RC", "UC", "RD", "UD", "CNP", "XRC", "T6", "T7"}

func (t Transport) String() string {
	if int(t) < len(transportNames) {
		return transportNames[t]
	}
	return "?"
}

// Transport returns the transport encoded in the opcode's top bits.
func (o Opcode) Transport() Transport { return Transport(o >> 5) }

// Op returns the operation part of the opcode, without the transport bits.
func (o Opcode) Op() uint8 { return uint8(o) & 0x1f }

// Operation codes (low five bits) of IBA 9.2.1 and of the Memory
// Placement Extensions.
const (
	OpSendFirst                 = 0x00
	OpSendMiddle                = 0x01
	OpSendLast                  = 0x02
	OpSendLastImm               = 0x03
	OpSendOnly                  = 0x04
	OpSendOnlyImm               = 0x05
	OpWriteFirst                = 0x06
	OpWriteMiddle               = 0x07
	OpWriteLast                 = 0x08
	OpWriteLastImm              = 0x09
	OpWriteOnly                 = 0x0a
	OpWriteOnlyImm              = 0x0b
	OpReadRequest               = 0x0c
	OpReadResponseFirst         = 0x0d
	OpReadResponseMiddle        = 0x0e
	OpReadResponseLast          = 0x0f
	OpReadResponseOnly          = 0x10
	OpAcknowledge               = 0x11
	OpAtomicAcknowledge         = 0x12
	OpCompareSwap               = 0x13
	OpFetchAdd                  = 0x14
	OpSendLastInv               = 0x16
	OpSendOnlyInv               = 0x17
	OpFlush                     = 0x1c
	OpAtomicWrite               = 0x1d
	OpCNP                Opcode = 0x81
)

// Header names an extended transport header that may follow the BTH.
type Header uint8

const (
	HdrNone Header = iota
	HdrDETH
	HdrRETH
	HdrAtomicETH
	HdrAETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	HdrFETH
	HdrCNPReserved // the 16 reserved bytes of a CNP
	numHeaders
)

var headerNames = [...]string{"", "DETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH", "FETH", "CNPReserved"}

func (h Header) String() string { return headerNames[h] }

// Len is the header's length in bytes.
func (h Header) Len() int { return headerLens[h] }

var headerLens = [numHeaders]int{0, DETHLen, RETHLen, AtomicETHLen, AETHLen, AtomicAckETHLen, ImmDtLen, IETHLen, FETHLen, CNPReservedLen}

// Position is where a packet sits in its message (IBA 9.7.1).
type Position uint8

const (
	PosNone   Position = iota // not part of a message sequence (ACK, CNP)
	PosFirst                  // first packet of a multi-packet message
	PosMiddle                 // neither first nor last
	PosLast                   // last packet of a multi-packet message
	PosOnly                   // the message's only packet
)

var positionNames = [...]string{"-", "FIRST", "MIDDLE", "LAST", "ONLY"}

func (p Position) String() string { return positionNames[p] }

// IsFirst reports whether the packet starts a message (FIRST or ONLY).
func (p Position) IsFirst() bool { return p == PosFirst || p == PosOnly }

// IsLast reports whether the packet ends a message (LAST or ONLY).
func (p Position) IsLast() bool { return p == PosLast || p == PosOnly }

// Class says who sends a packet and why.
type Class uint8

const (
	ClassInvalid  Class = iota // opcode not defined for RoCE
	ClassRequest               // requester → responder
	ClassResponse              // responder → requester, carrying data (RDMA READ response)
	ClassAck                   // responder → requester: ACKNOWLEDGE or ATOMIC ACKNOWLEDGE
	ClassCNP                   // notification point → reaction point
)

var classNames = [...]string{"invalid", "request", "response", "ack", "cnp"}

func (c Class) String() string { return classNames[c] }

// Kind is the operation family of an opcode.
type Kind uint8

const (
	KindNone Kind = iota
	KindSend
	KindWrite
	KindRead // RDMA READ request and responses
	KindAtomic
	KindAck
	KindFlush
	KindAtomicWrite
	KindCNP
)

// OpcodeInfo says what an opcode's packets look like. The table holds one
// entry for each of the 256 opcodes; undefined ones have Class ClassInvalid.
type OpcodeInfo struct {
	Name      string    // IBA name without the transport, e.g. "RDMA_WRITE_ONLY"
	Transport Transport // from the opcode's top bits
	Class     Class
	Kind      Kind
	Position  Position
	Imm       bool // carries ImmDt
	Inv       bool // carries IETH (SEND with invalidate)
	Payload   bool // may carry payload
	// Headers lists the extended transport headers after the BTH in wire
	// order; HdrLen is the BTH plus all of them.
	Headers [3]Header
	NumHdrs uint8
	HdrLen  int
	offsets [numHeaders]uint8 // header → offset from the BTH start; 0 = absent
}

// Has reports whether packets of this opcode carry header h.
func (oi *OpcodeInfo) Has(h Header) bool { return oi.offsets[h] != 0 }

// Offset returns where header h starts, counted from the start of the BTH,
// or 0 if the opcode has no such header.
func (oi *OpcodeInfo) Offset(h Header) int { return int(oi.offsets[h]) }

// Valid reports whether the opcode is defined for RoCE.
func (oi *OpcodeInfo) Valid() bool { return oi.Class != ClassInvalid }

// Info returns the opcode's table entry.
func (o Opcode) Info() *OpcodeInfo { return &opcodeTable[o] }

// String returns the transport and operation, e.g. "RC_RDMA_WRITE_ONLY",
// "CNP", or "OPCODE_0x3f" for an undefined opcode.
func (o Opcode) String() string { return opcodeStrings[o] }

var (
	opcodeTable   [256]OpcodeInfo
	opcodeStrings [256]string
)

// opDef defines one operation for the transports it is valid on. UD adds a
// DETH right after the BTH (IBA 9.3.2); RC and UC carry none.
type opDef struct {
	op         uint8
	name       string
	class      Class
	kind       Kind
	pos        Position
	payload    bool
	hdrs       []Header
	transports []Transport
}

var (
	rcuc   = []Transport{RC, UC}
	rcucud = []Transport{RC, UC, UD}
	rc     = []Transport{RC}
)

// opDefs is the opcode list of IBA 9.2.1 for RC, UC and UD (RD and XRC are not carried
// by RoCE stacks and stay undefined), plus the Memory Placement Extensions
// FLUSH and ATOMIC_WRITE that rxe implements for RC.
var opDefs = []opDef{
	{OpSendFirst, "SEND_FIRST", ClassRequest, KindSend, PosFirst, true, nil, rcuc},
	{OpSendMiddle, "SEND_MIDDLE", ClassRequest, KindSend, PosMiddle, true, nil, rcuc},
	{OpSendLast, "SEND_LAST", ClassRequest, KindSend, PosLast, true, nil, rcuc},
	{OpSendLastImm, "SEND_LAST_WITH_IMMEDIATE", ClassRequest, KindSend, PosLast, true, []Header{HdrImmDt}, rcuc},
	{OpSendOnly, "SEND_ONLY", ClassRequest, KindSend, PosOnly, true, nil, rcucud},
	{OpSendOnlyImm, "SEND_ONLY_WITH_IMMEDIATE", ClassRequest, KindSend, PosOnly, true, []Header{HdrImmDt}, rcucud},
	{OpWriteFirst, "RDMA_WRITE_FIRST", ClassRequest, KindWrite, PosFirst, true, []Header{HdrRETH}, rcuc},
	{OpWriteMiddle, "RDMA_WRITE_MIDDLE", ClassRequest, KindWrite, PosMiddle, true, nil, rcuc},
	{OpWriteLast, "RDMA_WRITE_LAST", ClassRequest, KindWrite, PosLast, true, nil, rcuc},
	{OpWriteLastImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", ClassRequest, KindWrite, PosLast, true, []Header{HdrImmDt}, rcuc},
	{OpWriteOnly, "RDMA_WRITE_ONLY", ClassRequest, KindWrite, PosOnly, true, []Header{HdrRETH}, rcuc},
	{OpWriteOnlyImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", ClassRequest, KindWrite, PosOnly, true, []Header{HdrRETH, HdrImmDt}, rcuc},
	{OpReadRequest, "RDMA_READ_REQUEST", ClassRequest, KindRead, PosOnly, false, []Header{HdrRETH}, rc},
	{OpReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", ClassResponse, KindRead, PosFirst, true, []Header{HdrAETH}, rc},
	{OpReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE", ClassResponse, KindRead, PosMiddle, true, nil, rc},
	{OpReadResponseLast, "RDMA_READ_RESPONSE_LAST", ClassResponse, KindRead, PosLast, true, []Header{HdrAETH}, rc},
	{OpReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", ClassResponse, KindRead, PosOnly, true, []Header{HdrAETH}, rc},
	{OpAcknowledge, "ACKNOWLEDGE", ClassAck, KindAck, PosNone, false, []Header{HdrAETH}, rc},
	{OpAtomicAcknowledge, "ATOMIC_ACKNOWLEDGE", ClassAck, KindAtomic, PosNone, false, []Header{HdrAETH, HdrAtomicAckETH}, rc},
	{OpCompareSwap, "COMPARE_SWAP", ClassRequest, KindAtomic, PosOnly, false, []Header{HdrAtomicETH}, rc},
	{OpFetchAdd, "FETCH_ADD", ClassRequest, KindAtomic, PosOnly, false, []Header{HdrAtomicETH}, rc},
	{OpSendLastInv, "SEND_LAST_WITH_INVALIDATE", ClassRequest, KindSend, PosLast, true, []Header{HdrIETH}, rc},
	{OpSendOnlyInv, "SEND_ONLY_WITH_INVALIDATE", ClassRequest, KindSend, PosOnly, true, []Header{HdrIETH}, rc},
	{OpFlush, "FLUSH", ClassRequest, KindFlush, PosOnly, false, []Header{HdrFETH, HdrRETH}, rc},
	{OpAtomicWrite, "ATOMIC_WRITE", ClassRequest, KindAtomicWrite, PosOnly, true, []Header{HdrRETH}, rc},
}

func init() {
	for i := range opcodeTable {
		o := Opcode(i)
		opcodeTable[i] = OpcodeInfo{Name: fmt.Sprintf("OPCODE_0x%02x", i), Transport: o.Transport()}
	}
	for _, d := range opDefs {
		for _, t := range d.transports {
			hdrs := d.hdrs
			if t == UD {
				hdrs = append([]Header{HdrDETH}, hdrs...)
			}
			define(Opcode(uint8(t)<<5|d.op), d, hdrs)
		}
	}
	define(OpCNP, opDef{name: "CNP", class: ClassCNP, kind: KindCNP}, []Header{HdrCNPReserved})
	for i := range opcodeTable {
		oi := &opcodeTable[i]
		if oi.Valid() {
			opcodeStrings[i] = oi.Transport.String() + "_" + oi.Name
			if oi.Transport == CNP {
				opcodeStrings[i] = "CNP"
			}
		} else {
			opcodeStrings[i] = oi.Name
		}
	}
}

func define(o Opcode, d opDef, hdrs []Header) {
	oi := &opcodeTable[o]
	*oi = OpcodeInfo{
		Name: d.name, Transport: o.Transport(), Class: d.class, Kind: d.kind, Position: d.pos,
		Payload: d.payload, NumHdrs: uint8(len(hdrs)), HdrLen: BTHLen,
	}
	for i, h := range hdrs {
		oi.Headers[i] = h
		oi.offsets[h] = uint8(oi.HdrLen)
		oi.HdrLen += h.Len()
		oi.Imm = oi.Imm || h == HdrImmDt
		oi.Inv = oi.Inv || h == HdrIETH
	}
}
