package qpstate

import (
	"fmt"
	"math/bits"
	"strings"
)

// AttrMask says which attributes a modify_qp call sets. The bits are those
// of enum ibv_qp_attr_mask (rdma-core libibverbs/verbs.h); bits 21–24 were
// never exposed by libibverbs and have no name here.
type AttrMask uint32

// Attribute bits.
const (
	AttrState            AttrMask = 1 << 0  // IBV_QP_STATE: qp_state
	AttrCurState         AttrMask = 1 << 1  // IBV_QP_CUR_STATE: cur_qp_state
	AttrEnSQDAsyncNotify AttrMask = 1 << 2  // IBV_QP_EN_SQD_ASYNC_NOTIFY: en_sqd_async_notify
	AttrAccessFlags      AttrMask = 1 << 3  // IBV_QP_ACCESS_FLAGS: qp_access_flags
	AttrPKeyIndex        AttrMask = 1 << 4  // IBV_QP_PKEY_INDEX: pkey_index
	AttrPort             AttrMask = 1 << 5  // IBV_QP_PORT: port_num
	AttrQKey             AttrMask = 1 << 6  // IBV_QP_QKEY: qkey
	AttrAV               AttrMask = 1 << 7  // IBV_QP_AV: ah_attr
	AttrPathMTU          AttrMask = 1 << 8  // IBV_QP_PATH_MTU: path_mtu
	AttrTimeout          AttrMask = 1 << 9  // IBV_QP_TIMEOUT: timeout
	AttrRetryCnt         AttrMask = 1 << 10 // IBV_QP_RETRY_CNT: retry_cnt
	AttrRNRRetry         AttrMask = 1 << 11 // IBV_QP_RNR_RETRY: rnr_retry
	AttrRQPSN            AttrMask = 1 << 12 // IBV_QP_RQ_PSN: rq_psn
	AttrMaxQPRdAtomic    AttrMask = 1 << 13 // IBV_QP_MAX_QP_RD_ATOMIC: max_rd_atomic
	AttrAltPath          AttrMask = 1 << 14 // IBV_QP_ALT_PATH: alt_ah_attr, alt_pkey_index, alt_port_num, alt_timeout
	AttrMinRNRTimer      AttrMask = 1 << 15 // IBV_QP_MIN_RNR_TIMER: min_rnr_timer
	AttrSQPSN            AttrMask = 1 << 16 // IBV_QP_SQ_PSN: sq_psn
	AttrMaxDestRdAtomic  AttrMask = 1 << 17 // IBV_QP_MAX_DEST_RD_ATOMIC: max_dest_rd_atomic
	AttrPathMigState     AttrMask = 1 << 18 // IBV_QP_PATH_MIG_STATE: path_mig_state
	AttrCap              AttrMask = 1 << 19 // IBV_QP_CAP: cap
	AttrDestQPN          AttrMask = 1 << 20 // IBV_QP_DEST_QPN: dest_qp_num
	AttrRateLimit        AttrMask = 1 << 25 // IBV_QP_RATE_LIMIT: rate_limit
)

// attrNames holds the name of each bit, indexed by bit number.
var attrNames = [...]string{
	0:  "STATE",
	1:  "CUR_STATE",
	2:  "EN_SQD_ASYNC_NOTIFY",
	3:  "ACCESS_FLAGS",
	4:  "PKEY_INDEX",
	5:  "PORT",
	6:  "QKEY",
	7:  "AV",
	8:  "PATH_MTU",
	9:  "TIMEOUT",
	10: "RETRY_CNT",
	11: "RNR_RETRY",
	12: "RQ_PSN",
	13: "MAX_QP_RD_ATOMIC",
	14: "ALT_PATH",
	15: "MIN_RNR_TIMER",
	16: "SQ_PSN",
	17: "MAX_DEST_RD_ATOMIC",
	18: "PATH_MIG_STATE",
	19: "CAP",
	20: "DEST_QPN",
	25: "RATE_LIMIT",
}

// String names the bits of m, lowest first, joined by "|" and without the
// IBV_QP_ prefix: "STATE|PATH_MTU|DEST_QPN". Bits without a name print as
// one hexadecimal value at the end; the empty mask prints as "0".
func (m AttrMask) String() string {
	if m == 0 {
		return "0"
	}
	var b strings.Builder
	var unnamed AttrMask
	for rest := m; rest != 0; rest &= rest - 1 {
		i := bits.TrailingZeros32(uint32(rest))
		if i >= len(attrNames) || attrNames[i] == "" {
			unnamed |= 1 << i
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString(attrNames[i])
	}
	if unnamed != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		fmt.Fprintf(&b, "%#x", uint32(unnamed))
	}
	return b.String()
}
