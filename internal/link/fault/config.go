package fault

import (
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/internal/wire"
)

// Config describes what a link does wrong on purpose to the packets it
// sends, for tests and for diagnosing applications. The zero value does
// nothing, and a link given it runs exactly as one without faults.
//
// Faults happen below the ICRC: the link fills a packet's ICRC, then the
// fault stage acts on the finished packet, so a corrupted packet carries a
// wrong ICRC and the receiving link drops it and counts it in
// its icrc_errors, as it would a packet damaged on a real wire. (Over IPv4
// the receiver's check is 16 bits strong, see docs/WIRE.md: about one
// corrupted packet in 65536 gets through.)
//
// Each packet passes these steps in order:
//
//	rules ──▶ drop ──▶ corrupt, CE mark, duplicate ──▶ reorder ──▶ delay ──▶ network
//
// In detail:
//
//  1. Random draws: one for each probability that is set (and the bit to
//     flip, the reorder distance and the jitter, whenever those are set),
//     always the same number per packet, so that one packet's fate or a rule
//     never shifts the faults of the packets after it.
//  2. Rules, in order: the first active rule that matches the packet adds
//     its action to what the draws decided (Rule).
//  3. A dropped packet is counted and gone.
//  4. Corrupt flips one bit of the packet, anywhere from the BTH through the
//     ICRC except BTH byte 4 (FECN, BECN and reserved bits, which the ICRC
//     leaves out because the network may change them). CEMark marks it ECN
//     Congestion Experienced (Packet.CE at the receiver). Duplicate sends
//     it twice in a row, both copies alike.
//  5. Reorder holds it back until k later packets have passed the stage, k
//     uniform in 1..ReorderWindow, or for at most 1 ms if traffic stops.
//  6. Delay and Jitter hold it for Delay plus a uniform [0, Jitter), counted
//     from when it leaves the reorder step.
//
// The stage never touches the caller's buffer beyond the ICRC: a packet it
// corrupts or holds is copied into a buffer of its own, from a pool.
//
// Same Seed, same packets in the same order: same drops, duplicates,
// corruptions, CE marks and reorder distances. Which later packets a held
// packet lands between also depends on time when the 1 ms reorder bound or a
// delay is involved. Rule windows (From, For) are measured from the link's
// creation.
//
// Delay, Jitter, Reorder and rules with action ActDelay make the link run
// one goroutine for the direction, which releases held packets when they
// are due; Close stops it and discards (and counts) what it still holds.
type Config struct {
	// Seed seeds the stage's PCG generator (math/rand/v2).
	Seed uint64

	// Probabilities in [0, 1], drawn for every packet.
	Drop      float64 // the packet is dropped
	Duplicate float64 // the packet is sent twice
	Reorder   float64 // the packet is held back behind later packets

	// ReorderWindow is the most later packets a reordered packet waits
	// for; 0 means 8.
	ReorderWindow int

	Corrupt float64 // one random bit of the packet the ICRC covers is flipped

	// Delay is added to every packet, Jitter a uniform extra delay in
	// [0, Jitter).
	Delay, Jitter time.Duration

	// CEMark is the probability the packet arrives marked ECN Congestion
	// Experienced: IP ECN bits 11 over UDP (TOS or traffic class),
	// Packet.CE over a memory pair.
	CEMark float64

	// Limit is the most packets held at once (reordered or delayed);
	// 0 means 4096. A packet that would be held beyond it is dropped and
	// counted in stats.FaultOverflow, as a full netem queue drops.
	Limit int

	// Rules are deterministic faults for matching packets; see Rule.
	Rules []Rule
}

// Action is what a Rule does to a matching packet.
type Action uint8

// Fault actions. The zero value is not an action, so a zero Rule is
// refused rather than silently matching something.
const (
	ActNone    Action = iota
	ActDrop           // drop the packet
	ActDup            // send it twice
	ActCorrupt        // flip one random bit
	ActDelay          // hold it for Rule.Delay more
	ActCE             // mark it ECN CE
)

var actionNames = [...]string{ActNone: "none", ActDrop: "drop", ActDup: "dup", ActCorrupt: "corrupt", ActDelay: "delay", ActCE: "ce"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Match selects packets by what they are, as the opcode table classes
// and kinds them (wire.OpcodeInfo).
type Match uint8

// Packet selectors for Rule.Match.
const (
	MatchAny      Match = iota
	MatchRequest        // requester to responder (wire.ClassRequest)
	MatchResponse       // RDMA READ responses (wire.ClassResponse)
	MatchAck            // ACKNOWLEDGE, NAKs included, and ATOMIC ACKNOWLEDGE (wire.ClassAck)
	MatchNAK            // ACKNOWLEDGE whose AETH is a NAK or an RNR NAK
	MatchCNP            // congestion notification packets
	MatchSend           // SEND requests (wire.KindSend)
	MatchWrite          // RDMA WRITE requests (wire.KindWrite)
	MatchRead           // RDMA READ requests and responses (wire.KindRead)
	MatchAtomic         // atomic requests and ATOMIC ACKNOWLEDGE (wire.KindAtomic)
	matchEnd
)

var matchNames = [...]string{
	MatchAny: "any", MatchRequest: "request", MatchResponse: "response", MatchAck: "ack", MatchNAK: "nak",
	MatchCNP: "cnp", MatchSend: "send", MatchWrite: "write", MatchRead: "read", MatchAtomic: "atomic",
}

func (m Match) String() string {
	if int(m) < len(matchNames) {
		return matchNames[m]
	}
	return fmt.Sprintf("Match(%d)", uint8(m))
}

// Rule is a deterministic fault: "drop every ACK for 50 ms", "drop PSN
// 0x1234 once", "CE-mark every READ response". A packet matches when every
// condition that is set holds; the first active matching rule of
// Config.Rules acts, and its action is added to the random faults
// (a rule ActDrop drops the packet whatever the draws said). Each match
// counts in stats.FaultRuleHits and in the counter of its action.
//
// Opcode, PSN and QP use -1 for "any"; Parse sets them so.
type Rule struct {
	Action Action
	Match  Match
	Opcode int   // -1: any; else the BTH opcode, 0..255
	PSN    int64 // -1: any; else the BTH PSN, 0..0xffffff
	QP     int64 // -1: any; else the BTH destination QP, 0..0xffffff

	// Count is how many matches the rule acts on; 0 means no limit.
	// "Once" is Count 1.
	Count int

	// The rule is active from From after the link's creation for For;
	// For 0 means from then on.
	From, For time.Duration

	// Delay is the extra hold of action ActDelay (> 0), added to the
	// configured Delay and jitter. Other actions leave it 0.
	Delay time.Duration
}

// What the stage did is counted in the link's counters (Stats), under
// stats.FaultSeen, FaultDropped (every packet that never reached the
// network: FaultDropChance + FaultOverflow + FaultDiscarded),
// FaultDuplicated, FaultReordered, FaultCorrupted, FaultDelayed,
// FaultCEMarked and FaultRuleHits.

// ErrBad is the error, wrapped with the item at fault, of Parse
// and Config.Validate.
var ErrBad = errors.New("link: bad fault configuration")

const (
	defaultReorderWindow = 8
	defaultLimit         = 4096
	maxReorderWindow     = 1 << 16
	maxPSN               = 1<<24 - 1 // PSNs and QPNs are 24 bits (IBA 9.2)

	// reorderBound is the longest a reordered packet waits for the later
	// packets it is to follow.
	reorderBound = time.Millisecond
)

// configErr returns ErrBad wrapped with the item and the reason.
func configErr(item, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrBad, item, fmt.Sprintf(format, args...))
}

// Validate reports the first field of c that is out of range, naming it.
func (c Config) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"Drop", c.Drop}, {"Duplicate", c.Duplicate}, {"Reorder", c.Reorder}, {"Corrupt", c.Corrupt}, {"CEMark", c.CEMark}} {
		if !(p.v >= 0 && p.v <= 1) { // NaN fails too
			return configErr(p.name, "%v is not a probability in [0, 1]", p.v)
		}
	}
	switch {
	case c.ReorderWindow < 0 || c.ReorderWindow > maxReorderWindow:
		return configErr("ReorderWindow", "%d not in 0..%d", c.ReorderWindow, maxReorderWindow)
	case c.Delay < 0:
		return configErr("Delay", "%v is negative", c.Delay)
	case c.Jitter < 0:
		return configErr("Jitter", "%v is negative", c.Jitter)
	case c.Limit < 0:
		return configErr("Limit", "%d is negative", c.Limit)
	}
	for i := range c.Rules {
		if err := c.Rules[i].validate(); err != nil {
			return fmt.Errorf("%w (Rules[%d])", err, i)
		}
	}
	return nil
}

func (r *Rule) validate() error {
	switch {
	case r.Action == ActNone || r.Action > ActCE:
		return configErr("Action", "%v is not an action", r.Action)
	case r.Match >= matchEnd:
		return configErr("Match", "%v is not a selector", r.Match)
	case r.Opcode < -1 || r.Opcode > 0xff:
		return configErr("Opcode", "%d not in -1..255", r.Opcode)
	case r.PSN < -1 || r.PSN > maxPSN:
		return configErr("PSN", "%d not in -1..0xffffff", r.PSN)
	case r.QP < -1 || r.QP > maxPSN:
		return configErr("QP", "%d not in -1..0xffffff", r.QP)
	case r.Count < 0:
		return configErr("Count", "%d is negative", r.Count)
	case r.From < 0 || r.For < 0:
		return configErr("From/For", "negative window %v+%v", r.From, r.For)
	case r.Action == ActDelay && r.Delay <= 0:
		return configErr("Delay", "action delay needs a Delay above zero")
	case r.Action != ActDelay && r.Delay != 0:
		return configErr("Delay", "set on action %v", r.Action)
	}
	return nil
}

// Active reports whether c makes the link do anything wrong at all.
func (c *Config) Active() bool {
	return c.Drop > 0 || c.Duplicate > 0 || c.Reorder > 0 || c.Corrupt > 0 || c.CEMark > 0 ||
		c.Delay > 0 || c.Jitter > 0 || len(c.Rules) > 0
}

// holds reports whether c may hold packets, which takes a goroutine.
func (c *Config) holds() bool {
	if c.Reorder > 0 || c.Delay > 0 || c.Jitter > 0 {
		return true
	}
	for i := range c.Rules {
		if c.Rules[i].Action == ActDelay {
			return true
		}
	}
	return false
}

// matches reports whether packet p (BTH through ICRC) is one the rule's
// conditions select. The time window and count are the stage's business.
func (r *Rule) matches(p []byte) bool {
	bth := wire.BTH(p[:wire.BTHLen])
	op := bth.Opcode()
	if r.Opcode >= 0 && int(op) != r.Opcode ||
		r.PSN >= 0 && int64(bth.PSN()) != r.PSN ||
		r.QP >= 0 && int64(bth.DestQP()) != r.QP {
		return false
	}
	info := op.Info()
	switch r.Match {
	case MatchAny:
		return true
	case MatchRequest:
		return info.Class == wire.ClassRequest
	case MatchResponse:
		return info.Class == wire.ClassResponse
	case MatchAck:
		return info.Class == wire.ClassAck
	case MatchNAK:
		return op == wire.OpAcknowledge && len(p) >= wire.BTHLen+wire.AETHLen &&
			wire.AETH(p[wire.BTHLen:]).Type() != wire.AckTypeACK
	case MatchCNP:
		return info.Class == wire.ClassCNP
	case MatchSend:
		return info.Kind == wire.KindSend
	case MatchWrite:
		return info.Kind == wire.KindWrite
	case MatchRead:
		return info.Kind == wire.KindRead
	case MatchAtomic:
		return info.Kind == wire.KindAtomic
	}
	return false
}
