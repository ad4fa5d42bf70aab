package qpstate

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// attrs is the attribute set of one QP type in one kernelTable cell, spelled
// as the kernel spells it without the IB_QP_ prefix.
type attrs struct{ req, opt string }

// kernelTable restates, cell by cell, the Linux kernel's qp_state_table
// (drivers/infiniband/core/verbs.c) for RC, UC and UD. A (from, to) pair
// missing here is a move the kernel does not allow. A type missing from a
// cell requires nothing and allows nothing but STATE.
var kernelTable = []struct {
	from, to State
	types    map[Type]attrs
}{
	{Reset, Reset, nil},
	{Reset, Init, map[Type]attrs{
		UD: {req: "PKEY_INDEX|PORT|QKEY"},
		UC: {req: "PKEY_INDEX|PORT|ACCESS_FLAGS"},
		RC: {req: "PKEY_INDEX|PORT|ACCESS_FLAGS"},
	}},
	{Init, Reset, nil},
	{Init, Err, nil},
	{Init, Init, map[Type]attrs{
		UD: {opt: "PKEY_INDEX|PORT|QKEY"},
		UC: {opt: "PKEY_INDEX|PORT|ACCESS_FLAGS"},
		RC: {opt: "PKEY_INDEX|PORT|ACCESS_FLAGS"},
	}},
	{Init, RTR, map[Type]attrs{
		UD: {opt: "PKEY_INDEX|QKEY"},
		UC: {req: "AV|PATH_MTU|DEST_QPN|RQ_PSN", opt: "ALT_PATH|ACCESS_FLAGS|PKEY_INDEX"},
		RC: {
			req: "AV|PATH_MTU|DEST_QPN|RQ_PSN|MAX_DEST_RD_ATOMIC|MIN_RNR_TIMER",
			opt: "ALT_PATH|ACCESS_FLAGS|PKEY_INDEX",
		},
	}},
	{RTR, Reset, nil},
	{RTR, Err, nil},
	{RTR, RTS, map[Type]attrs{
		UD: {req: "SQ_PSN", opt: "CUR_STATE|QKEY"},
		UC: {req: "SQ_PSN", opt: "CUR_STATE|ALT_PATH|ACCESS_FLAGS|PATH_MIG_STATE"},
		RC: {
			req: "TIMEOUT|RETRY_CNT|RNR_RETRY|SQ_PSN|MAX_QP_RD_ATOMIC",
			opt: "CUR_STATE|ALT_PATH|ACCESS_FLAGS|MIN_RNR_TIMER|PATH_MIG_STATE",
		},
	}},
	{RTS, Reset, nil},
	{RTS, Err, nil},
	{RTS, RTS, map[Type]attrs{
		UD: {opt: "CUR_STATE|QKEY"},
		UC: {opt: "CUR_STATE|ACCESS_FLAGS|ALT_PATH|PATH_MIG_STATE"},
		RC: {opt: "CUR_STATE|ACCESS_FLAGS|ALT_PATH|PATH_MIG_STATE|MIN_RNR_TIMER"},
	}},
	{RTS, SQD, map[Type]attrs{
		UD: {opt: "EN_SQD_ASYNC_NOTIFY"},
		UC: {opt: "EN_SQD_ASYNC_NOTIFY"},
		RC: {opt: "EN_SQD_ASYNC_NOTIFY"},
	}},
	{SQD, Reset, nil},
	{SQD, Err, nil},
	{SQD, RTS, map[Type]attrs{
		UD: {opt: "CUR_STATE|QKEY"},
		UC: {opt: "CUR_STATE|ALT_PATH|ACCESS_FLAGS|PATH_MIG_STATE"},
		RC: {opt: "CUR_STATE|ALT_PATH|ACCESS_FLAGS|MIN_RNR_TIMER|PATH_MIG_STATE"},
	}},
	{SQD, SQD, map[Type]attrs{
		UD: {opt: "PKEY_INDEX|QKEY"},
		UC: {opt: "AV|ALT_PATH|ACCESS_FLAGS|PKEY_INDEX|PATH_MIG_STATE"},
		RC: {opt: "PORT|AV|TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC|" +
			"MAX_DEST_RD_ATOMIC|ALT_PATH|ACCESS_FLAGS|PKEY_INDEX|MIN_RNR_TIMER|PATH_MIG_STATE"},
	}},
	{SQE, Reset, nil},
	{SQE, Err, nil},
	{SQE, RTS, map[Type]attrs{
		UD: {opt: "CUR_STATE|QKEY"},
		UC: {opt: "CUR_STATE|ACCESS_FLAGS"},
		// RC: nothing; an RC QP never enters SQE.
	}},
	{Err, Reset, nil},
	{Err, Err, nil},
}

var types = []Type{RC, UC, UD}

// allStates includes Unknown and one value past it, neither of which may
// take part in any move.
var allStates = []State{Reset, Init, RTR, RTS, SQD, SQE, Err, Unknown, State(8)}

// parseMask turns "PATH_MTU|DEST_QPN" back into a mask.
func parseMask(t *testing.T, s string) AttrMask {
	t.Helper()
	var m AttrMask
	if s == "" {
		return 0
	}
next:
	for name := range strings.SplitSeq(s, "|") {
		for i := range 32 {
			if bit := AttrMask(1) << i; bit.String() == name {
				m |= bit
				continue next
			}
		}
		t.Fatalf("unknown attribute %q", name)
	}
	return m
}

// bitsOf lists the single bits of m, lowest first.
func bitsOf(m AttrMask) []AttrMask {
	var out []AttrMask
	for i := range 32 {
		if bit := AttrMask(1) << i; m&bit != 0 {
			out = append(out, bit)
		}
	}
	return out
}

func TestKernelTable(t *testing.T) {
	valid := make(map[[2]State]map[Type]attrs)
	for _, c := range kernelTable {
		valid[[2]State{c.from, c.to}] = c.types
	}
	for _, typ := range types {
		for _, from := range allStates {
			for _, to := range allStates {
				cell, ok := valid[[2]State{from, to}]
				t.Run(fmt.Sprintf("%v/%v→%v", typ, from, to), func(t *testing.T) {
					if !ok {
						checkInvalid(t, typ, from, to)
						return
					}
					checkValid(t, typ, from, to, cell[typ])
				})
			}
		}
	}
}

func checkInvalid(t *testing.T, typ Type, from, to State) {
	t.Helper()
	if got := Required(typ, from, to); got != 0 {
		t.Errorf("Required = %v, want 0", got)
	}
	if got := Optional(typ, from, to); got != 0 {
		t.Errorf("Optional = %v, want 0", got)
	}
	for _, mask := range []AttrMask{0, AttrState, ^AttrMask(0)} {
		err := Check(typ, from, to, mask)
		var te *TransitionError
		if !errors.As(err, &te) || !te.Invalid {
			t.Fatalf("Check(mask %v) = %v, want an invalid-transition error", mask, err)
		}
		if !errors.Is(err, ErrTransition) || errors.Is(err, ErrMissingAttr) || errors.Is(err, ErrExtraAttr) {
			t.Errorf("Check(mask %v) = %v: matches the wrong sentinels", mask, err)
		}
		if want := fmt.Sprintf("%v→%v: transition not allowed", from, to); err.Error() != want {
			t.Errorf("Check(mask %v) = %q, want %q", mask, err, want)
		}
	}
}

func checkValid(t *testing.T, typ Type, from, to State, a attrs) {
	t.Helper()
	req, opt := parseMask(t, a.req), parseMask(t, a.opt)
	if from != to {
		req |= AttrState // moving needs STATE
	} else {
		opt |= AttrState // staying may name the state
	}
	if got := Required(typ, from, to); got != req {
		t.Errorf("Required = %v, want %v", got, req)
	}
	if got := Optional(typ, from, to); got != opt {
		t.Errorf("Optional = %v, want %v", got, opt)
	}
	if err := Check(typ, from, to, req); err != nil {
		t.Errorf("Check(required %v) = %v, want nil", req, err)
	}
	if err := Check(typ, from, to, req|opt); err != nil {
		t.Errorf("Check(required|optional %v) = %v, want nil", req|opt, err)
	}
	for _, bit := range bitsOf(req) {
		err := Check(typ, from, to, (req|opt)&^bit)
		var te *TransitionError
		if !errors.As(err, &te) || te.Missing != bit || te.Extra != 0 || te.Invalid {
			t.Errorf("Check without %v = %#v, want Missing %v", bit, err, bit)
			continue
		}
		if !errors.Is(err, ErrMissingAttr) || errors.Is(err, ErrExtraAttr) || errors.Is(err, ErrTransition) {
			t.Errorf("Check without %v = %v: matches the wrong sentinels", bit, err)
		}
		if want := fmt.Sprintf("%v→%v: missing attribute %v", from, to, bit); err.Error() != want {
			t.Errorf("Check without %v = %q, want %q", bit, err, want)
		}
	}
	for _, bit := range bitsOf(^(req | opt)) {
		err := Check(typ, from, to, req|bit)
		var te *TransitionError
		if !errors.As(err, &te) || te.Extra != bit || te.Missing != 0 || te.Invalid {
			t.Errorf("Check with %v = %#v, want Extra %v", bit, err, bit)
			continue
		}
		if !errors.Is(err, ErrExtraAttr) || errors.Is(err, ErrMissingAttr) || errors.Is(err, ErrTransition) {
			t.Errorf("Check with %v = %v: matches the wrong sentinels", bit, err)
		}
		if want := fmt.Sprintf("%v→%v: attribute %v not allowed", from, to, bit); err.Error() != want {
			t.Errorf("Check with %v = %q, want %q", bit, err, want)
		}
	}
}

// TestManPage checks the required attributes listed in ibv_modify_qp(3)
// (rdma-core's libibverbs/man/ibv_modify_qp.3) for RESET→INIT→RTR→RTS.
func TestManPage(t *testing.T) {
	tests := []struct {
		typ      Type
		from, to State
		want     string
	}{
		{UD, Reset, Init, "STATE|PKEY_INDEX|PORT|QKEY"},
		{UD, Init, RTR, "STATE"},
		{UD, RTR, RTS, "STATE|SQ_PSN"},
		{UC, Reset, Init, "STATE|PKEY_INDEX|PORT|ACCESS_FLAGS"},
		{UC, Init, RTR, "STATE|AV|PATH_MTU|DEST_QPN|RQ_PSN"},
		{UC, RTR, RTS, "STATE|SQ_PSN"},
		{RC, Reset, Init, "STATE|PKEY_INDEX|PORT|ACCESS_FLAGS"},
		{RC, Init, RTR, "STATE|AV|PATH_MTU|DEST_QPN|RQ_PSN|MAX_DEST_RD_ATOMIC|MIN_RNR_TIMER"},
		{RC, RTR, RTS, "STATE|SQ_PSN|MAX_QP_RD_ATOMIC|RETRY_CNT|RNR_RETRY|TIMEOUT"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%v→%v", tt.typ, tt.from, tt.to), func(t *testing.T) {
			want := parseMask(t, tt.want)
			if got := Required(tt.typ, tt.from, tt.to); got != want {
				t.Errorf("Required = %v, want %v", got, want)
			}
			if err := Check(tt.typ, tt.from, tt.to, want); err != nil {
				t.Errorf("Check(%v) = %v, want nil", want, err)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	rtr := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN |
		AttrMaxDestRdAtomic | AttrMinRNRTimer
	tests := []struct {
		typ      Type
		from, to State
		mask     AttrMask
		want     string
	}{
		{RC, Init, RTR, rtr &^ (AttrPathMTU | AttrDestQPN), "INIT→RTR: missing attribute PATH_MTU|DEST_QPN"},
		{RC, Reset, RTS, AttrState, "RESET→RTS: transition not allowed"},
		{RC, Init, RTR, rtr | AttrTimeout, "INIT→RTR: attribute TIMEOUT not allowed"},
		{
			RC, Init, RTR, rtr&^AttrDestQPN | AttrTimeout | AttrQKey,
			"INIT→RTR: missing attribute DEST_QPN; attribute QKEY|TIMEOUT not allowed",
		},
		{UD, Reset, Init, AttrPKeyIndex | AttrPort | AttrQKey, "RESET→INIT: missing attribute STATE"},
		{RC, RTR, RTR, AttrTimeout, "RTR→RTR: transition not allowed"},
		{UC, RTS, RTS, AttrRateLimit, "RTS→RTS: attribute RATE_LIMIT not allowed"},
		{UD, Reset, Err, AttrState, "RESET→ERR: transition not allowed"},
		{Type(8), Reset, Init, AttrState | AttrPort, "RESET→INIT: transition not allowed for QP type Type(8)"},
		{RC, Unknown, Reset, AttrState, "UNKNOWN→RESET: transition not allowed"},
	}
	for _, tt := range tests {
		err := Check(tt.typ, tt.from, tt.to, tt.mask)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Check(%v, %v, %v, %v) = %v, want %q", tt.typ, tt.from, tt.to, tt.mask, err, tt.want)
		}
	}
}

// TestSentinels checks that one error can match several rules.
func TestSentinels(t *testing.T) {
	err := Check(RC, Reset, Init, AttrState|AttrPort|AttrPKeyIndex|AttrQKey)
	if !errors.Is(err, ErrMissingAttr) || !errors.Is(err, ErrExtraAttr) || errors.Is(err, ErrTransition) {
		t.Errorf("Check = %v: want ErrMissingAttr and ErrExtraAttr, not ErrTransition", err)
	}
	wrapped := fmt.Errorf("verbs: QP 0x12 %w", err)
	if !errors.Is(wrapped, ErrExtraAttr) {
		t.Errorf("wrapped %v does not match ErrExtraAttr", wrapped)
	}
	if got, want := wrapped.Error(), "verbs: QP 0x12 RESET→INIT: missing attribute ACCESS_FLAGS; attribute QKEY not allowed"; got != want {
		t.Errorf("wrapped = %q, want %q", got, want)
	}
}

// TestCurState checks the kernel's rule that CUR_STATE may be given only
// from RTR, RTS, SQD and SQE, and then only on the moves to RTS.
func TestCurState(t *testing.T) {
	for _, typ := range types {
		for _, from := range allStates {
			for _, to := range allStates {
				if Required(typ, from, to)|Optional(typ, from, to) == 0 {
					continue // not a valid move
				}
				wantOK := to == RTS && (from == RTR || from == RTS || from == SQD ||
					from == SQE && typ != RC)
				err := Check(typ, from, to, Required(typ, from, to)|AttrCurState)
				if gotOK := err == nil; gotOK != wantOK {
					t.Errorf("%v %v→%v with CUR_STATE: Check = %v, want ok=%v", typ, from, to, err, wantOK)
				}
			}
		}
	}
}

func TestCheckCurState(t *testing.T) {
	tests := []struct {
		actual  State
		mask    AttrMask
		claimed State
		wantErr string
	}{
		{RTS, AttrState, Reset, ""}, // no CUR_STATE: claimed is ignored
		{SQE, AttrState | AttrCurState, SQE, ""},
		{SQE, AttrState | AttrCurState, RTS, "CUR_STATE RTS does not match state SQE"},
		{RTS, AttrCurState, SQD, "CUR_STATE SQD does not match state RTS"},
	}
	for _, tt := range tests {
		err := CheckCurState(tt.actual, tt.mask, tt.claimed)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("CheckCurState(%v, %v, %v) = %v, want nil", tt.actual, tt.mask, tt.claimed, err)
			}
			continue
		}
		if err == nil || err.Error() != tt.wantErr || !errors.Is(err, ErrCurState) {
			t.Errorf("CheckCurState(%v, %v, %v) = %v, want %q matching ErrCurState",
				tt.actual, tt.mask, tt.claimed, err, tt.wantErr)
		}
	}
}

// TestNeverAllowed checks attributes the kernel allows for none of RC, UC
// and UD: RATE_LIMIT (raw packet QPs only) and CAP.
func TestNeverAllowed(t *testing.T) {
	for _, typ := range types {
		for _, from := range allStates {
			for _, to := range allStates {
				if Optional(typ, from, to)&(AttrRateLimit|AttrCap) != 0 {
					t.Errorf("%v %v→%v allows %v", typ, from, to, Optional(typ, from, to))
				}
				if err := Check(typ, from, to, Required(typ, from, to)|AttrRateLimit); !errors.Is(err, ErrExtraAttr) && !errors.Is(err, ErrTransition) {
					t.Errorf("%v %v→%v with RATE_LIMIT: Check = %v, want an error", typ, from, to, err)
				}
			}
		}
	}
}

// TestWithoutState covers modify_qp calls that change attributes only: the
// QP stays where it is, which some states allow and others do not.
func TestWithoutState(t *testing.T) {
	tests := []struct {
		typ   Type
		cur   State
		mask  AttrMask
		valid bool
	}{
		{RC, Reset, 0, true},
		{RC, Init, AttrAccessFlags, true},
		{UD, Init, AttrQKey, true},
		{RC, RTR, AttrMinRNRTimer, false}, // no RTR→RTR
		{RC, RTS, AttrAltPath | AttrPathMigState, true},
		{RC, RTS, AttrMinRNRTimer, true},
		{UC, RTS, AttrMinRNRTimer, false},
		{UC, SQD, AttrAV, true},
		{UD, SQE, AttrQKey, false}, // no SQE→SQE
		{RC, Err, 0, true},
	}
	for _, tt := range tests {
		next := Next(tt.cur, tt.mask, Reset)
		if err := Check(tt.typ, tt.cur, next, tt.mask); (err == nil) != tt.valid {
			t.Errorf("%v %v with %v: Check = %v, want ok=%v", tt.typ, tt.cur, tt.mask, err, tt.valid)
		}
	}
}

func TestCheckAllocs(t *testing.T) {
	mask := Required(RC, RTR, RTS)
	if n := testing.AllocsPerRun(100, func() { _ = Check(RC, RTR, RTS, mask) }); n != 0 {
		t.Errorf("Check allocates %v times on success, want 0", n)
	}
}
