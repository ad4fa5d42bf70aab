package qpstate

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors, for errors.Is. A *TransitionError matches each one whose
// rule it breaks.
var (
	// ErrTransition means the move itself is not allowed (IBA 10.3.1).
	ErrTransition = errors.New("qpstate: transition not allowed")
	// ErrMissingAttr means the move requires an attribute the call does not set.
	ErrMissingAttr = errors.New("qpstate: missing attribute")
	// ErrExtraAttr means the call sets an attribute the move does not allow.
	ErrExtraAttr = errors.New("qpstate: attribute not allowed")
	// ErrCurState means the call's AttrCurState names a state the QP is not in.
	ErrCurState = errors.New("qpstate: CUR_STATE does not match the QP state")
)

// TransitionError describes a modify_qp call that Check rejects. Its
// message names the move and the rule, not the QP: "INIT→RTR: missing
// attribute PATH_MTU|DEST_QPN"; callers prefix the QP.
type TransitionError struct {
	Type     Type
	From, To State
	Missing  AttrMask // required attributes the call did not set
	Extra    AttrMask // attributes the call set that the move does not allow
	Invalid  bool     // the move itself is not allowed for Type
}

func (e *TransitionError) Error() string {
	var b strings.Builder
	b.WriteString(e.From.String())
	b.WriteString("→")
	b.WriteString(e.To.String())
	if e.Invalid {
		b.WriteString(": transition not allowed")
		if !supported(e.Type) {
			fmt.Fprintf(&b, " for QP type %v", e.Type)
		}
		return b.String()
	}
	sep := ": "
	if e.Missing != 0 {
		fmt.Fprintf(&b, "%smissing attribute %v", sep, e.Missing)
		sep = "; "
	}
	if e.Extra != 0 {
		fmt.Fprintf(&b, "%sattribute %v not allowed", sep, e.Extra)
	}
	return b.String()
}

// Is reports whether e breaks the rule target stands for: ErrTransition,
// ErrMissingAttr or ErrExtraAttr.
func (e *TransitionError) Is(target error) bool {
	switch target {
	case ErrTransition:
		return e.Invalid
	case ErrMissingAttr:
		return e.Missing != 0
	case ErrExtraAttr:
		return e.Extra != 0
	}
	return false
}

// Check validates a modify_qp call: moving a QP of type t from cur to next
// (next == cur when mask lacks AttrState; see Next) with attributes mask.
// It returns nil or a *TransitionError.
//
// cur is the state as the caller sees it: the QP's state, after
// CheckCurState has confirmed any AttrCurState the call carries. The rules
// are the kernel's ib_modify_qp_is_ok (see table): the move must be in the
// table, mask must hold every Required attribute and nothing beyond Required
// and Optional. AttrCurState is allowed only on the moves to RTS from RTR,
// RTS, SQD and SQE, which the table encodes.
func Check(t Type, cur, next State, mask AttrMask) error {
	if _, ok := lookup(t, cur, next); !ok {
		return &TransitionError{Type: t, From: cur, To: next, Invalid: true}
	}
	req := Required(t, cur, next)
	missing := req &^ mask
	extra := mask &^ (req | Optional(t, cur, next))
	if missing == 0 && extra == 0 {
		return nil
	}
	return &TransitionError{Type: t, From: cur, To: next, Missing: missing, Extra: extra}
}

// CheckCurState confirms the AttrCurState of a modify_qp call: when mask
// has AttrCurState, claimed (the call's cur_qp_state) must equal actual,
// the QP's state. The error matches ErrCurState.
//
// The kernel and rxe do not compare: they take cur_qp_state as the current
// state ("Assume this is the current QP state", ibv_modify_qp(3)). goroce
// knows its QPs' states and refuses a call that is mistaken about one.
func CheckCurState(actual State, mask AttrMask, claimed State) error {
	if mask&AttrCurState == 0 || claimed == actual {
		return nil
	}
	return curStateError{claimed: claimed, actual: actual}
}

type curStateError struct{ claimed, actual State }

func (e curStateError) Error() string {
	return fmt.Sprintf("CUR_STATE %v does not match state %v", e.claimed, e.actual)
}

func (e curStateError) Is(target error) bool { return target == ErrCurState }
