package transport

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/internal/memory"
)

// WROpcode is a send work request's operation, with the values of enum
// ibv_wr_opcode.
type WROpcode uint8

const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6
	WRLocalInv          WROpcode = 7
	WRBindMW            WROpcode = 8
	WRSendWithInv       WROpcode = 9
)

var wrOpcodeNames = [...]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ",
	"ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW", "SEND_WITH_INV"}

func (o WROpcode) String() string {
	if int(o) < len(wrOpcodeNames) {
		return wrOpcodeNames[o]
	}
	return fmt.Sprintf("WR_OPCODE_%d", uint8(o))
}

// SendFlags are the flags of a send work request (enum ibv_send_flags).
type SendFlags uint32

const (
	SendFence     SendFlags = 1 << 0 // wait for earlier RDMA READs and atomics to complete
	SendSignaled  SendFlags = 1 << 1 // generate a completion even without sq_sig_all
	SendSolicited SendFlags = 1 << 2 // set the solicited event bit
	SendInline    SendFlags = 1 << 3 // copy the data at post time
)

// WCStatus is a work completion's status (enum ibv_wc_status).
type WCStatus uint8

const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRDReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
	WCTMErr
	WCTMRndvIncomplete
)

var wcStatusNames = [...]string{"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
	"WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR",
	"REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR",
	"REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR",
	"TM_ERR", "TM_RNDV_INCOMPLETE"}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WC_STATUS_%d", uint8(s))
}

// WCOpcode is a work completion's operation (enum ibv_wc_opcode).
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCRecv            WCOpcode = 1 << 7
	WCRecvRDMAWithImm WCOpcode = WCRecv + 1
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WC_OPCODE_%d", uint8(o))
}

// WCFlags are a work completion's flags (enum ibv_wc_flags).
type WCFlags uint32

const (
	WCWithImm WCFlags = 1 << 1 // Imm is valid
	WCWithInv WCFlags = 1 << 3 // InvRKey is valid: the sender invalidated it
	WCGRH     WCFlags = 1 << 0 // the receive buffer starts with a GRH (UD)
)

// WC is a work completion (struct ibv_wc).
type WC struct {
	WRID    uint64
	Status  WCStatus
	Opcode  WCOpcode
	ByteLen uint32
	Imm     uint32 // the immediate data, as the four bytes on the wire read big-endian
	InvRKey uint32 // with WCWithInv: the R_Key the SEND_WITH_INV invalidated
	QPNum   uint32
	SrcQP   uint32
	Flags   WCFlags
}

// SendWR is a send work request (struct ibv_send_wr).
type SendWR struct {
	WRID       uint64
	Opcode     WROpcode
	Flags      SendFlags
	SGL        []memory.SGE
	Imm        uint32 // SEND_WITH_IMM, RDMA_WRITE_WITH_IMM
	InvRKey    uint32 // SEND_WITH_INV, LOCAL_INV: the R_Key to invalidate
	RemoteAddr uint64 // RDMA and atomic operations
	RKey       uint32
	CompareAdd uint64 // ATOMIC_CMP_AND_SWP: compare; ATOMIC_FETCH_AND_ADD: add
	Swap       uint64 // ATOMIC_CMP_AND_SWP

	// UD only (wr.ud of struct ibv_send_wr): the address handle, the
	// destination QP and its Q_Key. A Q_Key with bit 31 set stands for
	// the sending QP's own Q_Key (IBA 10.2.5).
	AH         AddressHandle
	RemoteQPN  uint32
	RemoteQKey uint32
}

// AddressHandle is where a UD work request goes. The verbs layer's AH
// implements it; PostSend resolves it once, so the handle may be destroyed
// after posting.
type AddressHandle interface {
	// Dest returns the peer's IP address and UDP port.
	Dest() netip.AddrPort
}

// Origin is what the link knows about where a received packet came from
// and where it was sent: the UD responder writes it into the receive
// buffer as the GRH.
type Origin struct {
	Src netip.AddrPort // source address and UDP port
	Dst netip.Addr     // destination address (the device's, or a multicast group)
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	WRID uint64
	SGL  []memory.SGE
}
