package wire

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"
)

// AETHLen is the length of the ACK Extended Transport Header.
const AETHLen = 4

// AETH is a view of an ACK Extended Transport Header (IBA 9.3.1):
//
//	byte 0     syndrome: reserved(7) type(6:5) value(4:0)
//	bytes 1-3  MSN, the responder's message sequence number
//
// The syndrome type says what the value means (IBA 9.7.5):
// ACK with an end-to-end credit count, RNR NAK with a timer code, or NAK
// with an error code.
type AETH []byte

// AckType is the type field of an AETH syndrome.
type AckType uint8

const (
	AckTypeACK      AckType = 0 // positive acknowledgement; value = credit count
	AckTypeRNRNAK   AckType = 1 // receiver not ready; value = RNR timer code
	AckTypeReserved AckType = 2 // reserved encoding
	AckTypeNAK      AckType = 3 // negative acknowledgement; value = NAKCode
)

func (k AckType) String() string {
	switch k {
	case AckTypeACK:
		return "ACK"
	case AckTypeRNRNAK:
		return "RNR_NAK"
	case AckTypeNAK:
		return "NAK"
	}
	return "RESERVED"
}

// NAKCode is the value of a NAK syndrome (IBA 9.7.5.2).
type NAKCode uint8

const (
	NAKPSNSeqError   NAKCode = 0 // PSN sequence error: the responder expected an earlier PSN
	NAKInvalidReq    NAKCode = 1 // invalid request
	NAKRemoteAccess  NAKCode = 2 // remote access error (R_Key, bounds, access rights)
	NAKRemoteOpError NAKCode = 3 // remote operational error
	NAKInvalidRDReq  NAKCode = 4 // invalid RD request
)

var nakNames = [...]string{"PSN_SEQ_ERR", "INV_REQ", "REM_ACCESS_ERR", "REM_OP_ERR", "INV_RD_REQ"}

func (c NAKCode) String() string {
	if int(c) < len(nakNames) {
		return nakNames[c]
	}
	return fmt.Sprintf("NAK_RESERVED_%d", uint8(c))
}

// CreditsInvalid is the credit count code meaning "no credit information"
// (IBA 9.7.7.2.5); rxe always sends it (AETH_ACK_UNLIMITED).
const CreditsInvalid = 0x1f

// Syndrome assembles an AETH syndrome from its type and 5-bit value.
func Syndrome(k AckType, value uint8) uint8 { return uint8(k&3)<<5 | value&0x1f }

func (h AETH) Syndrome() uint8     { return h[0] }
func (h AETH) Type() AckType       { return AckType(h[0]>>5) & 3 }
func (h AETH) Value() uint8        { return h[0] & 0x1f }
func (h AETH) MSN() uint32         { return uint32(h[1])<<16 | uint32(h[2])<<8 | uint32(h[3]) }
func (h AETH) SetSyndrome(s uint8) { h[0] = s }
func (h AETH) SetMSN(msn uint32)   { h[1], h[2], h[3] = byte(msn>>16), byte(msn>>8), byte(msn) }

// Fields returns the header's fields.
func (h AETH) Fields() AETHFields { return AETHFields{Syndrome: h.Syndrome(), MSN: h.MSN()} }

// AETHFields are the fields of an AETH.
type AETHFields struct {
	Syndrome uint8 // see Syndrome
	MSN      uint32
}

// Encode writes the header into b[:AETHLen].
func (f *AETHFields) Encode(b []byte) {
	binary.BigEndian.PutUint32(b[:AETHLen], uint32(f.Syndrome)<<24|f.MSN&0xffffff)
}

// creditCounts maps an ACK credit count code to a number of receive WQEs
// (IBA 9.7.7.2.5). Code 31 is CreditsInvalid.
var creditCounts = [31]int{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384,
	512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// Credits decodes an ACK credit count code. ok is false for CreditsInvalid.
func Credits(code uint8) (n int, ok bool) {
	if code&0x1f >= CreditsInvalid {
		return 0, false
	}
	return creditCounts[code&0x1f], true
}

// rnrTimer is the minimum RNR NAK timer field (IBA 9.7.5.2.8), in
// units of 10 µs: code 0 means 655.36 ms, 1 means 0.01 ms, … 31 means 491.52 ms.
var rnrTimer = [32]uint32{
	65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
}

// RNRTimeout returns the delay an RNR NAK timer code asks for.
func RNRTimeout(code uint8) time.Duration {
	return time.Duration(rnrTimer[code&0x1f]) * 10 * time.Microsecond
}

// AckSummary describes an AETH syndrome as `goroce decode` prints it:
// "ACK credits=inv", "ACK credits=64", "RNR_NAK timer=1.28ms" or
// "NAK code=REM_ACCESS_ERR".
func (h AETH) AckSummary() string {
	switch h.Type() {
	case AckTypeACK:
		if n, ok := Credits(h.Value()); ok {
			return "ACK credits=" + strconv.Itoa(n)
		}
		return "ACK credits=inv"
	case AckTypeRNRNAK:
		return "RNR_NAK timer=" + RNRTimeout(h.Value()).String()
	case AckTypeNAK:
		return "NAK code=" + NAKCode(h.Value()).String()
	}
	return "RESERVED value=" + strconv.Itoa(int(h.Value()))
}
