package verbs

import (
	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/transport"
)

// Work requests, completions and their enumerations, with the names and
// values of libibverbs (struct ibv_send_wr, ibv_wc, enum ibv_wc_status, …).
type (
	SGE       = memory.SGE
	SendWR    = transport.SendWR
	RecvWR    = transport.RecvWR
	WC        = transport.WC
	WCStatus  = transport.WCStatus
	WCOpcode  = transport.WCOpcode
	WCFlags   = transport.WCFlags
	WROpcode  = transport.WROpcode
	SendFlags = transport.SendFlags
	Access    = memory.Access
	QPState   = qpstate.State
	QPType    = qpstate.Type
	AttrMask  = qpstate.AttrMask
)

// Work request opcodes (enum ibv_wr_opcode).
const (
	WRRDMAWrite         = transport.WRRDMAWrite
	WRRDMAWriteWithImm  = transport.WRRDMAWriteWithImm
	WRSend              = transport.WRSend
	WRSendWithImm       = transport.WRSendWithImm
	WRRDMARead          = transport.WRRDMARead
	WRAtomicCmpAndSwp   = transport.WRAtomicCmpAndSwp
	WRAtomicFetchAndAdd = transport.WRAtomicFetchAndAdd
	WRLocalInv          = transport.WRLocalInv
	WRSendWithInv       = transport.WRSendWithInv
)

// Send flags (enum ibv_send_flags).
const (
	SendFence     = transport.SendFence
	SendSignaled  = transport.SendSignaled
	SendSolicited = transport.SendSolicited
	SendInline    = transport.SendInline
)

// Work completion statuses (enum ibv_wc_status).
const (
	WCSuccess        = transport.WCSuccess
	WCLocLenErr      = transport.WCLocLenErr
	WCLocQPOpErr     = transport.WCLocQPOpErr
	WCLocProtErr     = transport.WCLocProtErr
	WCWRFlushErr     = transport.WCWRFlushErr
	WCBadRespErr     = transport.WCBadRespErr
	WCLocAccessErr   = transport.WCLocAccessErr
	WCRemInvReqErr   = transport.WCRemInvReqErr
	WCRemAccessErr   = transport.WCRemAccessErr
	WCRemOpErr       = transport.WCRemOpErr
	WCRetryExcErr    = transport.WCRetryExcErr
	WCRNRRetryExcErr = transport.WCRNRRetryExcErr
	WCRemInvRDReqErr = transport.WCRemInvRDReqErr
	WCFatalErr       = transport.WCFatalErr
	WCGeneralErr     = transport.WCGeneralErr
)

// Work completion opcodes (enum ibv_wc_opcode).
const (
	WCSend            = transport.WCSend
	WCRDMAWrite       = transport.WCRDMAWrite
	WCRDMARead        = transport.WCRDMARead
	WCCompSwap        = transport.WCCompSwap
	WCFetchAdd        = transport.WCFetchAdd
	WCLocalInv        = transport.WCLocalInv
	WCRecv            = transport.WCRecv
	WCRecvRDMAWithImm = transport.WCRecvRDMAWithImm
)

// Work completion flags (enum ibv_wc_flags).
const (
	WCWithImm = transport.WCWithImm
	WCWithInv = transport.WCWithInv
	WCGRH     = transport.WCGRH // UD: the receive buffer starts with the 40-byte GRH
)

// Memory access flags (enum ibv_access_flags).
const (
	AccessLocalWrite   = memory.AccessLocalWrite
	AccessRemoteWrite  = memory.AccessRemoteWrite
	AccessRemoteRead   = memory.AccessRemoteRead
	AccessRemoteAtomic = memory.AccessRemoteAtomic
)

// QP states (enum ibv_qp_state).
const (
	QPSReset = qpstate.Reset
	QPSInit  = qpstate.Init
	QPSRTR   = qpstate.RTR
	QPSRTS   = qpstate.RTS
	QPSSQD   = qpstate.SQD
	QPSSQE   = qpstate.SQE
	QPSErr   = qpstate.Err
)

// QP types (enum ibv_qp_type).
const (
	QPTypeRC = qpstate.RC
	QPTypeUC = qpstate.UC
	QPTypeUD = qpstate.UD
)

// QP attribute mask bits (enum ibv_qp_attr_mask).
const (
	AttrState           = qpstate.AttrState
	AttrCurState        = qpstate.AttrCurState
	AttrAccessFlags     = qpstate.AttrAccessFlags
	AttrPKeyIndex       = qpstate.AttrPKeyIndex
	AttrPort            = qpstate.AttrPort
	AttrQKey            = qpstate.AttrQKey
	AttrAV              = qpstate.AttrAV
	AttrPathMTU         = qpstate.AttrPathMTU
	AttrTimeout         = qpstate.AttrTimeout
	AttrRetryCnt        = qpstate.AttrRetryCnt
	AttrRNRRetry        = qpstate.AttrRNRRetry
	AttrRQPSN           = qpstate.AttrRQPSN
	AttrMaxQPRdAtomic   = qpstate.AttrMaxQPRdAtomic
	AttrMinRNRTimer     = qpstate.AttrMinRNRTimer
	AttrSQPSN           = qpstate.AttrSQPSN
	AttrMaxDestRdAtomic = qpstate.AttrMaxDestRdAtomic
	AttrDestQPN         = qpstate.AttrDestQPN
)
