package device

import (
	"slices"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/wire"
)

// The send schedule: when a worker's turn writes the packets its QPs emit.
//
// A turn queues the packets the transport emits (worker.Emit) and writes
// them in batches that grow through the turn: the first after firstWrite
// packets, so that the peer starts on them while the rest are built, then
// each as large as all the turn has written so far, at least 2*firstWrite,
// up to link.MaxBatch, so that a long turn costs few system calls; the rest
// go when the turn ends. A batch ends early where the transport asks
// (Env.Push: a signaled WR that more follow) if at least pushWrite packets
// are queued, and, in an inline post's turn on a link that writes cheaply,
// every eagerBatch packets.
//
// At the end of a busy poller's turn, plain ACKs may stay queued for up to
// ackHold (holdAcks): the application that polled is about to post its
// answer, and the answer's turn writes the ACK after it in one system call.
// An ACK may be delayed and coalesced (IBA 9.7.5.1.2: an ACK acknowledges
// every earlier PSN), and an ACK and a request travel in independent PSN
// spaces, so their order is free.
//
// txSchedule holds no clock and no goroutine: the worker passes the
// queue and the times, and tests drive it directly.

const (
	// firstWrite is how many packets a turn queues before its first
	// write (docs/design/tuning.md#first-write).
	firstWrite = 32
	// pushWrite is the fewest queued packets that Push writes.
	pushWrite = firstWrite / 2
	// eagerBatch is how many packets a post run inline on an idle worker
	// queues before writing them, where the link writes cheaply (the
	// same-host path): a multi-packet message then reaches the peer in
	// pieces that it starts placing while the rest is being built. Over
	// UDP each write is a system call, and a turn writes on the usual
	// schedule (docs/design/tuning.md#eager-batch).
	eagerBatch = 4
	// ackHold is how long a busy poller's turn may hold back the ACKs it
	// queued: far below any retry timeout, and longer than an
	// application takes to answer a message it polled for.
	ackHold = 20 * time.Microsecond
	// answerWindow is how recently a worker must have written a request
	// for a poller's turn on it to hold back ACKs: a worker whose QPs
	// only receive, a bandwidth test's server, has no answer to wait for,
	// and holding its ACKs would only keep the sender's window shut
	// longer (docs/design/tuning.md#ack-hold).
	answerWindow = time.Millisecond
)

// txSchedule is one worker's send schedule.
type txSchedule struct {
	written int           // packets written in this turn
	eager   bool          // an inline post's turn on a link that writes cheaply
	held    int           // tx[:held] are ACKs held back by a poller's turn
	lastReq monotime.Time // when a request packet was last written; zero: never
}

// writeAt is how many queued packets make Emit write them. The second
// write takes up to 2*firstWrite packets, not firstWrite as the rule
// would, so that Push can end it: perftest's signaled WR, the 72nd of a
// turn of 100, then goes with the second write.
func (s *txSchedule) writeAt() int {
	if s.written == 0 {
		return firstWrite
	}
	return min(max(s.written, 2*firstWrite), link.MaxBatch)
}

// emitWrites reports whether a turn with queued packets waiting writes
// them now, after an Emit.
func (s *txSchedule) emitWrites(queued int) bool {
	return queued >= s.writeAt() || s.eager && queued >= eagerBatch
}

// pushWrites reports whether a turn with queued packets waiting writes
// them now, after a Push. With perftest's bandwidth defaults (128 WRs
// outstanding, every 100th signaled) the signaled WR is the 72nd of the
// 100 a turn posts: written with the 40 before it, the peer's ACK comes
// back while the last 28 are built and sent, and the poster finds its
// completion as soon as its turn ends. Fewer queued packets wait for the
// schedule, so that a WR signaled every few does not cost a system call
// each.
func (s *txSchedule) pushWrites(queued int) bool { return queued >= pushWrite }

// wrote notes n packets written in this turn.
func (s *txSchedule) wrote(n int) { s.written += n }

// endTurn resets what lasts a turn.
func (s *txSchedule) endTurn() { s.eager, s.written = false, 0 }

// holdAcks decides, at the end of a turn, whether the packets queued in tx
// stay queued: in a busy poller's turn (polled, the time of the poll that
// read its packets; zero in any other turn), when all of them are plain
// ACKs and the worker wrote a request of its own within answerWindow, they
// wait until the ACKs already held (due at heldAt; zero: none are) are
// due, or for ackHold. It returns whether they stay and when they are due.
//
// The poll's time decides, not a clock read of the turn's own: it is a
// poll's cycle old at most, where ackHold and answerWindow are tens of
// microseconds and more. Held ACKs are written by the first of: the
// worker's next turn that is not a poller's, the poller's first poll that
// finds nothing after they are due (poll.go: flushHeld), the end of
// polling. No timer writes them: arming one per message would wake the Go
// netpoller's thread each time.
func (s *txSchedule) holdAcks(tx []link.Packet, polled, heldAt monotime.Time) (bool, monotime.Time) {
	if polled.IsZero() || !onlyAcks(tx) || !s.answers(polled) || !heldAt.IsZero() && !polled.Before(heldAt) {
		return false, heldAt
	}
	if heldAt.IsZero() {
		heldAt = polled.Add(ackHold)
	}
	s.held = len(tx)
	return true, heldAt
}

// answers reports whether the worker wrote a request within answerWindow
// of now.
func (s *txSchedule) answers(now monotime.Time) bool {
	return !s.lastReq.IsZero() && now.Sub(s.lastReq) < answerWindow
}

// order puts the held ACKs at the front of tx after what was queued since:
// the answer a poller's application posted leaves first, and its receiver,
// polling, has it while the kernel is still delivering the ACK.
func (s *txSchedule) order(tx []link.Packet) {
	if h := s.held; h > 0 {
		s.held = 0
		slices.Reverse(tx[:h])
		slices.Reverse(tx[h:])
		slices.Reverse(tx)
	}
}

// onlyAcks reports whether tx holds packets and all of them are ACKs
// without payload.
func onlyAcks(tx []link.Packet) bool {
	for i := range tx {
		if wire.BTH(tx[i].Buf).Opcode() != wire.OpAcknowledge {
			return false
		}
	}
	return len(tx) > 0
}

// hasRequest reports whether tx holds a request packet.
func hasRequest(tx []link.Packet) bool {
	for i := range tx {
		if wire.BTH(tx[i].Buf).Opcode().Info().Class == wire.ClassRequest {
			return true
		}
	}
	return false
}
