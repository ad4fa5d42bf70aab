package transport

import "github.com/goroce/goroce/internal/wire"

// packets returns how many packets carry a message of n bytes at the
// given path MTU: one per MTU or part of one, and one for an empty
// message, which still takes a packet and its PSN.
func packets(n uint64, mtu int) int {
	return max(int((n+uint64(mtu)-1)/uint64(mtu)), 1)
}

// position returns where a packet sits in its message (IBA 9.7.1), from
// whether it is the message's first packet and whether it is its last.
func position(first, last bool) wire.Position {
	switch {
	case first && last:
		return wire.PosOnly
	case first:
		return wire.PosFirst
	case last:
		return wire.PosLast
	}
	return wire.PosMiddle
}

// The operation codes (IBA 9.2.1, without the transport's bits) of a
// SEND, an RDMA WRITE and an RDMA READ response packet at each position
// in its message, without immediate data or invalidation.
var (
	sendOps = [...]uint8{wire.PosFirst: wire.OpSendFirst, wire.PosMiddle: wire.OpSendMiddle,
		wire.PosLast: wire.OpSendLast, wire.PosOnly: wire.OpSendOnly}
	writeOps = [...]uint8{wire.PosFirst: wire.OpWriteFirst, wire.PosMiddle: wire.OpWriteMiddle,
		wire.PosLast: wire.OpWriteLast, wire.PosOnly: wire.OpWriteOnly}
	readResponseOps = [...]uint8{wire.PosFirst: wire.OpReadResponseFirst, wire.PosMiddle: wire.OpReadResponseMiddle,
		wire.PosLast: wire.OpReadResponseLast, wire.PosOnly: wire.OpReadResponseOnly}
)
