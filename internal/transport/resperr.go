package transport

import "github.com/goroce/goroce/internal/wire"

// respError names the responder check a request failed. Each maps to one
// NAK code for the requester and, where a receive WQE was being filled, one
// completion status for it (IBA 9.7.5.2, rxe_resp.c's RESPST_ERR_* states).
// Every one of them moves the QP to ERR.
type respError uint8

const (
	errOpSequence       respError = iota // opcode does not continue/start a message (IBA 9.7.5.1.5)
	errUnsupportedOp                     // operation the responder does not offer (FLUSH, ATOMIC_WRITE)
	errQPAccess                          // the QP's access flags forbid the operation
	errTooManyRdAtomic                   // more than max_dest_rd_atomic READs/atomics outstanding
	errMisalignedAtomic                  // atomic target not 8-byte aligned
	errRKeyViolation                     // R_Key, bounds or MR rights (IBA 9.7.5.2.4)
	errWriteLength                       // WRITE payload disagrees with the RETH length or the MTU
	errRecvLength                        // SEND longer than the receive WQE (IBA 9.7.5.2.1)
	errRecvProtection                    // the receive WQE's SGEs are not valid local memory
	errInvalidateRKey                    // SEND with invalidate names an R_Key that cannot be revoked
)

var respErrors = [...]struct {
	name string
	nak  wire.NAKCode
	recv WCStatus // for the receive WQE in progress; SUCCESS when none is affected
}{
	errOpSequence:       {"opcode sequence", wire.NAKInvalidReq, WCSuccess},
	errUnsupportedOp:    {"unsupported operation", wire.NAKInvalidReq, WCSuccess},
	errQPAccess:         {"QP access flags", wire.NAKInvalidReq, WCSuccess},
	errTooManyRdAtomic:  {"too many outstanding READs/atomics", wire.NAKInvalidReq, WCSuccess},
	errMisalignedAtomic: {"misaligned atomic", wire.NAKInvalidReq, WCSuccess},
	errRKeyViolation:    {"R_Key violation", wire.NAKRemoteAccess, WCSuccess},
	errWriteLength:      {"RDMA WRITE length", wire.NAKInvalidReq, WCSuccess},
	errRecvLength:       {"receive buffer too small", wire.NAKInvalidReq, WCLocLenErr},
	errRecvProtection:   {"receive buffer not valid local memory", wire.NAKRemoteOpError, WCLocProtErr},
	errInvalidateRKey:   {"R_Key to invalidate", wire.NAKInvalidReq, WCLocQPOpErr},
}

func (e respError) String() string { return respErrors[e].name }
