package transport

import (
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/wire"
)

// The Unreliable Connected service (IBA 9.8, rxe_resp.c check_psn and
// check_op_seq for UC). The requester is RC's without AckReq, window or
// retransmission; a message completes when its last packet has gone. The
// responder accepts packets in PSN order and never answers:
//
//	expected PSN, continues the message   execute, expect PSN+1
//	PSN gap or dropping, FIRST/ONLY        start over: the new message begins
//	PSN gap or dropping, MIDDLE/LAST       drop, and keep dropping until a FIRST/ONLY
//	FIRST/ONLY while a message is open     the open message lost its end: discard it,
//	                                       reuse its receive WQE for the new one
//	MIDDLE/LAST with no message open       drop the rest of that message
//
// So a lost packet costs exactly the message it belonged to: its receive
// WQE is not completed, and the next message lands in it.

// ucSequence applies the UC PSN and opcode sequence rules to a request
// packet and reports whether it is to be executed.
func (qp *QP) ucSequence(p *wire.Packet, pn psn.PSN) bool {
	r := &qp.resp
	first := p.Info.Position.IsFirst()
	if pn != r.psn || r.dropMsg {
		if !first {
			r.discard()
			return false
		}
		r.dropMsg = false
	}
	switch {
	case first && r.inMsg:
		r.inMsg, r.recvOff, r.write = false, 0, nil // the open message lost its end
	case !first && (!r.inMsg || p.Info.Kind != r.msgKind):
		r.discard()
		return false
	}
	return true
}

// discard drops the UC message in progress and everything of it still to
// come. A receive WQE it had taken stays for the next message.
func (r *responder) discard() {
	r.dropMsg, r.inMsg = true, false
	r.recvOff, r.write, r.writeOff = 0, nil, 0
}
