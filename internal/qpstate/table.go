package qpstate

// table is the transition table. It carries the facts of the Linux kernel's
// qp_state_table (drivers/infiniband/core/verbs.c, used by
// ib_modify_qp_is_ok and so by rdma_rxe) for RC, UC and UD; the kernel's
// rows for XRC, raw packet and the SMI/GSI special QPs are left out. Like the
// kernel's, the required and optional sets leave out AttrState, which
// Required and Optional add back.
//
// Notable facts of the table, all kept here:
//   - Every state may move to RESET, RESET included; every state but RESET
//     may move to ERR. RESET→ERR is not allowed.
//   - RTR→RTR and SQE→SQE are not allowed, so a modify_qp without AttrState
//     fails on a QP in RTR or SQE.
//   - AttrCurState is optional only on the moves to RTS from RTR, RTS, SQD
//     and SQE (for RC not even from SQE), which is how the kernel's rule
//     "CUR_STATE only from RTR, RTS, SQD or SQE" falls out of the table.
//   - SQE→RTS is valid for RC too, with nothing but AttrState allowed,
//     although an RC QP never enters SQE (IBA 10.3.1: send errors on RC
//     take the QP to ERR).
//   - AttrCap (resizing the queues) appears nowhere; AttrRateLimit only for
//     raw packet QPs, so for RC, UC and UD both are always rejected.
//   - AttrPort may be changed in SQD→SQD only on RC, not on UC or UD.
var table = [Err + 1][Err + 1]rule{
	Reset: {
		Reset: {valid: true},
		Init: {
			valid: true,
			req: perType{
				rc: AttrPKeyIndex | AttrPort | AttrAccessFlags,
				uc: AttrPKeyIndex | AttrPort | AttrAccessFlags,
				ud: AttrPKeyIndex | AttrPort | AttrQKey,
			},
		},
	},
	Init: {
		Reset: {valid: true},
		Err:   {valid: true},
		Init: {
			valid: true,
			opt: perType{
				rc: AttrPKeyIndex | AttrPort | AttrAccessFlags,
				uc: AttrPKeyIndex | AttrPort | AttrAccessFlags,
				ud: AttrPKeyIndex | AttrPort | AttrQKey,
			},
		},
		RTR: {
			valid: true,
			req: perType{
				rc: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN |
					AttrMaxDestRdAtomic | AttrMinRNRTimer,
				uc: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
			},
			opt: perType{
				rc: AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
				uc: AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
				ud: AttrPKeyIndex | AttrQKey,
			},
		},
	},
	RTR: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {
			valid: true,
			req: perType{
				rc: AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN |
					AttrMaxQPRdAtomic,
				uc: AttrSQPSN,
				ud: AttrSQPSN,
			},
			opt: perType{
				rc: AttrCurState | AttrAltPath | AttrAccessFlags |
					AttrMinRNRTimer | AttrPathMigState,
				uc: AttrCurState | AttrAltPath | AttrAccessFlags |
					AttrPathMigState,
				ud: AttrCurState | AttrQKey,
			},
		},
	},
	RTS: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {
			valid: true,
			opt: perType{
				rc: AttrCurState | AttrAccessFlags | AttrAltPath |
					AttrPathMigState | AttrMinRNRTimer,
				uc: AttrCurState | AttrAccessFlags | AttrAltPath |
					AttrPathMigState,
				ud: AttrCurState | AttrQKey,
			},
		},
		SQD: {
			valid: true,
			opt: perType{
				rc: AttrEnSQDAsyncNotify,
				uc: AttrEnSQDAsyncNotify,
				ud: AttrEnSQDAsyncNotify,
			},
		},
	},
	SQD: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {
			valid: true,
			opt: perType{
				rc: AttrCurState | AttrAltPath | AttrAccessFlags |
					AttrMinRNRTimer | AttrPathMigState,
				uc: AttrCurState | AttrAltPath | AttrAccessFlags |
					AttrPathMigState,
				ud: AttrCurState | AttrQKey,
			},
		},
		SQD: {
			valid: true,
			opt: perType{
				rc: AttrPort | AttrAV | AttrTimeout | AttrRetryCnt |
					AttrRNRRetry | AttrMaxQPRdAtomic | AttrMaxDestRdAtomic |
					AttrAltPath | AttrAccessFlags | AttrPKeyIndex |
					AttrMinRNRTimer | AttrPathMigState,
				uc: AttrAV | AttrAltPath | AttrAccessFlags | AttrPKeyIndex |
					AttrPathMigState,
				ud: AttrPKeyIndex | AttrQKey,
			},
		},
	},
	SQE: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {
			valid: true,
			opt: perType{
				uc: AttrCurState | AttrAccessFlags,
				ud: AttrCurState | AttrQKey,
			},
		},
	},
	Err: {
		Reset: {valid: true},
		Err:   {valid: true},
	},
}

// rule is one cell of the table: whether the move is allowed at all and,
// per QP type, the attributes it requires and those it also accepts.
type rule struct {
	valid bool
	req   perType
	opt   perType
}

// perType holds one attribute set for each QP type.
type perType struct {
	rc, uc, ud AttrMask
}

func (p perType) of(t Type) AttrMask {
	switch t {
	case RC:
		return p.rc
	case UC:
		return p.uc
	case UD:
		return p.ud
	}
	return 0
}

// supported reports whether t is a QP type this package has rules for.
func supported(t Type) bool { return t == RC || t == UC || t == UD }

// lookup returns the table cell for cur→next, and false if the move is not
// allowed for any QP type or t is not a type this package knows.
func lookup(t Type, cur, next State) (rule, bool) {
	if !supported(t) || cur > Err || next > Err {
		return rule{}, false
	}
	r := table[cur][next]
	return r, r.valid
}

// Required returns the attributes a modify_qp call moving a QP of type t
// from cur to next must set: the kernel table's set plus AttrState when the
// state changes. It returns 0 for a move that is not allowed.
func Required(t Type, cur, next State) AttrMask {
	r, ok := lookup(t, cur, next)
	if !ok {
		return 0
	}
	m := r.req.of(t)
	if cur != next {
		m |= AttrState
	}
	return m
}

// Optional returns the attributes a modify_qp call moving a QP of type t
// from cur to next may set beyond Required: the kernel table's set plus
// AttrState when the state stays the same. It returns 0 for a move that is
// not allowed.
func Optional(t Type, cur, next State) AttrMask {
	r, ok := lookup(t, cur, next)
	if !ok {
		return 0
	}
	m := r.opt.of(t)
	if cur == next {
		m |= AttrState
	}
	return m
}
