// Package qpstate implements the queue pair state machine of IBA 10.3 and the
// attribute rules of ibv_modify_qp: which attributes each transition requires
// and which it allows, per QP type.
//
// The diagram shows the transitions modify_qp may make (IBA 10.3.1,
// 11.2.4.2) as the Linux kernel's ib_modify_qp_is_ok allows them. Solid arrows are modify_qp calls,
// labelled with the requested state; dotted ones are moves the QP makes on
// its own, which this package does not check.
//
//	           create
//	             |
//	             v
//	           RESET <------------- RESET, from every state (itself too)
//	             |
//	             | INIT
//	             v
//	           INIT ----+ INIT
//	             | ^----+
//	             |
//	             | RTR              (no RTR -> RTR: an RTR QP is changed
//	             v                   only by moving it on)
//	            RTR
//	             |
//	             | RTS
//	             v
//	 +-------> RTS -----+ RTS
//	 |         | ^ ^----+
//	 |     SQD | | RTS
//	 |         v |
//	 |         SQD -----+ SQD
//	 | RTS       ^------+
//	 |
//	SQE <. . . . . . . . RTS, when a UC or UD send completes in error
//
//	ERR <-------------- ERR, from every state but RESET
//	    <. . . . . . . . any state, on an error the QP detects
//
// Check validates a modify_qp call against this diagram and the attribute
// table; Required and Optional expose that table.
package qpstate

import "fmt"

// State is a QP state. The values are those of enum ibv_qp_state.
type State uint8

// QP states (IBA 10.3.1).
const (
	Reset   State = iota // IBV_QPS_RESET: just created or reset; queues empty
	Init                 // IBV_QPS_INIT: receives may be posted, nothing is processed
	RTR                  // IBV_QPS_RTR: ready to receive
	RTS                  // IBV_QPS_RTS: ready to send
	SQD                  // IBV_QPS_SQD: send queue drain(ing/ed)
	SQE                  // IBV_QPS_SQE: send queue error (UC, UD)
	Err                  // IBV_QPS_ERR: work requests complete with flush errors
	Unknown              // IBV_QPS_UNKNOWN: never a valid state to move to or from
)

var stateNames = [...]string{
	Reset:   "RESET",
	Init:    "INIT",
	RTR:     "RTR",
	RTS:     "RTS",
	SQD:     "SQD",
	SQE:     "SQE",
	Err:     "ERR",
	Unknown: "UNKNOWN",
}

// String returns the name rdma-core uses without its IBV_QPS_ prefix, such
// as "RTS", or "State(9)" for a value outside the enum.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Type is a QP transport service type. The values are those of enum
// ibv_qp_type; only the types goroce implements are named.
type Type uint8

// QP types.
const (
	RC Type = 2 // IBV_QPT_RC: reliable connected
	UC Type = 3 // IBV_QPT_UC: unreliable connected
	UD Type = 4 // IBV_QPT_UD: unreliable datagram
)

// String returns "RC", "UC" or "UD", or "Type(8)" for any other value.
func (t Type) String() string {
	switch t {
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Next returns the state a modify_qp call moves a QP in state cur to: the
// requested state if mask has AttrState, cur otherwise.
func Next(cur State, mask AttrMask, requested State) State {
	if mask&AttrState != 0 {
		return requested
	}
	return cur
}
