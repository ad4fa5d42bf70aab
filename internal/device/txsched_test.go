package device

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/wire"
)

// TestWriteAt: a turn's first write comes after firstWrite packets, the
// second after 2*firstWrite, then each after as many as the turn has
// written, up to link.MaxBatch.
func TestWriteAt(t *testing.T) {
	var s txSchedule
	var got []int
	for range 6 {
		n := s.writeAt()
		got = append(got, n)
		s.wrote(n)
	}
	want := []int{32, 64, 96, 128, 128, 128}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("writes of %v packets, want %v", got, want)
		}
	}
	s.endTurn()
	if n := s.writeAt(); n != firstWrite {
		t.Errorf("a new turn writes after %d packets, want %d", n, firstWrite)
	}
}

// TestEmitAndPushWrites: Emit writes on the schedule, or every eagerBatch
// packets in an eager turn; Push writes once pushWrite packets are queued.
func TestEmitAndPushWrites(t *testing.T) {
	var s txSchedule
	for _, tc := range []struct {
		queued      int
		eager, want bool
	}{
		{firstWrite - 1, false, false},
		{firstWrite, false, true},
		{eagerBatch - 1, true, false},
		{eagerBatch, true, true},
	} {
		s.eager = tc.eager
		if got := s.emitWrites(tc.queued); got != tc.want {
			t.Errorf("emitWrites(%d), eager %v = %v, want %v", tc.queued, tc.eager, got, tc.want)
		}
	}
	if s.pushWrites(pushWrite-1) || !s.pushWrites(pushWrite) {
		t.Errorf("pushWrites: want a write from %d queued packets", pushWrite)
	}
}

// packets returns packets whose BTHs carry ops.
func packets(ops ...wire.Opcode) []link.Packet {
	var tx []link.Packet
	for _, op := range ops {
		b := make([]byte, wire.BTHLen+wire.ICRCLen)
		f := wire.BTHFields{Opcode: op}
		f.Encode(b)
		tx = append(tx, link.Packet{Buf: b})
	}
	return tx
}

// TestHoldAcks: a poller's turn holds plain ACKs back, for ackHold from
// its poll, only on a worker that wrote a request within answerWindow;
// later turns keep the first due time, and none holds past it.
func TestHoldAcks(t *testing.T) {
	ack, write := wire.Opcode(wire.OpAcknowledge), wire.Opcode(wire.OpWriteOnly)
	poll := monotime.Time(int64(time.Hour))
	recent := poll.Add(-answerWindow / 2)
	for _, tc := range []struct {
		name    string
		tx      []link.Packet
		polled  monotime.Time
		heldAt  monotime.Time
		lastReq monotime.Time
		hold    bool
		due     monotime.Time
	}{
		{"not a poller's turn", packets(ack), 0, 0, recent, false, 0},
		{"nothing queued", nil, poll, 0, recent, false, 0},
		{"a request queued", packets(ack, write), poll, 0, recent, false, 0},
		{"no request written", packets(ack), poll, 0, 0, false, 0},
		{"request long ago", packets(ack), poll, 0, poll.Add(-2 * answerWindow), false, 0},
		{"held", packets(ack, ack), poll, 0, recent, true, poll.Add(ackHold)},
		{"held before", packets(ack), poll, poll.Add(ackHold / 2), recent, true, poll.Add(ackHold / 2)},
		{"due", packets(ack), poll, poll, recent, false, poll},
	} {
		s := txSchedule{lastReq: tc.lastReq}
		hold, due := s.holdAcks(tc.tx, tc.polled, tc.heldAt)
		if hold != tc.hold || due != tc.due {
			t.Errorf("%s: holdAcks = %v, %v; want %v, %v", tc.name, hold, due, tc.hold, tc.due)
		}
		if hold && s.held != len(tc.tx) {
			t.Errorf("%s: %d held, want %d", tc.name, s.held, len(tc.tx))
		}
	}
}

// TestOrderHeldAcks: held ACKs leave after what was queued since.
func TestOrderHeldAcks(t *testing.T) {
	ack, write := wire.Opcode(wire.OpAcknowledge), wire.Opcode(wire.OpWriteOnly)
	tx := packets(ack, ack, write, write, write)
	tx[0].Buf[4], tx[1].Buf[4] = 1, 2 // mark the ACKs apart
	s := txSchedule{held: 2}
	s.order(tx)
	var got []wire.Opcode
	for _, p := range tx {
		got = append(got, wire.BTH(p.Buf).Opcode())
	}
	if got[0] != write || got[2] != write || got[3] != ack || got[4] != ack || tx[3].Buf[4] != 1 || tx[4].Buf[4] != 2 {
		t.Errorf("order: %v, want the three WRITEs, then the ACKs in their order", got)
	}
	if s.held != 0 {
		t.Errorf("held %d after order, want 0", s.held)
	}
	if !hasRequest(tx) || hasRequest(packets(ack)) || !onlyAcks(packets(ack)) || onlyAcks(nil) {
		t.Error("hasRequest/onlyAcks")
	}
}
