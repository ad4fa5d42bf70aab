// Package stats keeps a device's counters, with the names Linux rxe gives
// its hw_counters (/sys/class/infiniband/<dev>/ports/1/hw_counters), plus
// byte and drop counts. The counters of a device live in a small file
// mapped into memory, so that another process — `goroce stats` — can read
// them while the device runs, the way rxe's show up in sysfs.
package stats

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Counter names one counter.
type Counter int

// Source says who counts a counter.
type Source uint8

const (
	// ByDevice counters are counted by the device's engine and
	// transport, in the device's counters.
	ByDevice Source = iota
	// ByLink counters are counted by the device's link, in the link's
	// own counters (link.Link.Stats), and copied into the device's.
	ByLink
)

// Info describes a counter.
type Info struct {
	Name      string // as Linux rxe, rdma-core or `goroce stats` name it
	Doc       string // what it counts
	Source    Source
	Published bool // part of Device.Counters and `goroce stats`; else kept for tests and diagnosis
}

// The counters. The first fifteen are rxe's hw_counters, in rxe's order;
// table below says what each counts and who counts it.
const (
	SentPkts Counter = iota
	RcvdPkts
	DuplicateRequest
	OutOfSeqRequest
	RcvdRNRErr
	SendRNRErr
	RcvdSeqErr
	AckDeferred
	RetryExceededErr
	RetryRNRExceededErr
	CompleterRetryErr
	SendErr
	LinkDowned
	RDMASends
	RDMARecvs
	SentBytes
	RcvdBytes
	ICRCErrors
	Malformed
	SocketDrops
	FaultDropped
	FaultDuplicated
	FaultReordered
	FaultCorrupted
	FaultDelayed
	FaultCEMarked
	SameHostPkts
	SameHostDrops
	ColdWrites
	ColdSources
	ConnectedPorts
	UnconnectedPorts
	IDRecoveries
	FlowSockets
	FlowDatagrams
	LoneSends
	SegmentOptions
	EarlyGoBacks
	SpuriousGoBacks

	// What a link counts for itself, unpublished.
	LinkSentPkts
	LinkSentBytes
	LinkRcvdPkts
	LinkRcvdBytes
	LinkMalformed
	LinkOversized
	LinkSendErrors
	PortFallbacks
	FaultSeen
	FaultDropChance
	FaultRuleHits
	FaultOverflow
	FaultDiscarded

	NumCounters
)

// table is every counter's description: the one place a counter is
// defined. Names, the published set and what the device copies from its
// link all derive from it.
var table = [NumCounters]Info{
	SentPkts:            {"sent_pkts", "packets sent", ByDevice, true},
	RcvdPkts:            {"rcvd_pkts", "packets received and accepted (ICRC correct, well formed, for a QP)", ByDevice, true},
	DuplicateRequest:    {"duplicate_request", "requests the responder had already executed", ByDevice, true},
	OutOfSeqRequest:     {"out_of_seq_request", "requests beyond the expected PSN", ByDevice, true},
	RcvdRNRErr:          {"rcvd_rnr_err", "RNR NAKs received", ByDevice, true},
	SendRNRErr:          {"send_rnr_err", "RNR NAKs sent", ByDevice, true},
	RcvdSeqErr:          {"rcvd_seq_err", "PSN sequence error NAKs received", ByDevice, true},
	AckDeferred:         {"ack_deferred", "ACKs not sent because a later one covered them", ByDevice, true},
	RetryExceededErr:    {"retry_exceeded_err", "WQEs failed with RETRY_EXC_ERR", ByDevice, true},
	RetryRNRExceededErr: {"retry_rnr_exceeded_err", "WQEs failed with RNR_RETRY_EXC_ERR", ByDevice, true},
	CompleterRetryErr:   {"completer_retry_err", "retransmissions after a timeout or sequence NAK", ByDevice, true},
	SendErr:             {"send_err", "packets the link refused", ByDevice, true},
	LinkDowned:          {"link_downed", "always 0: a UDP path has no link state", ByDevice, true},
	RDMASends:           {"rdma_sends", "SEND work requests completed", ByDevice, true},
	RDMARecvs:           {"rdma_recvs", "receive work requests completed", ByDevice, true},
	SentBytes:           {"sent_bytes", "UDP payload bytes sent", ByDevice, true},
	RcvdBytes:           {"rcvd_bytes", "UDP payload bytes received and accepted", ByDevice, true},
	ICRCErrors:          {"icrc_errors", "packets dropped for a bad ICRC", ByLink, true},
	Malformed:           {"malformed", "packets dropped as malformed or for no QP", ByDevice, true},
	SocketDrops:         {"socket_drops", "datagrams the kernel dropped on the link's sockets (a full receive buffer)", ByLink, true},
	FaultDropped:        {"fault_dropped", "fault injection: packets that never reached the network (dropped on purpose, or lost from the stage's holds)", ByLink, true},
	FaultDuplicated:     {"fault_duplicated", "fault injection: packets sent twice", ByLink, true},
	FaultReordered:      {"fault_reordered", "fault injection: packets held back behind later ones", ByLink, true},
	FaultCorrupted:      {"fault_corrupted", "fault injection: packets sent with a bit flipped, duplicates included", ByLink, true},
	FaultDelayed:        {"fault_delayed", "fault injection: packets delayed", ByLink, true},
	FaultCEMarked:       {"fault_ce_marked", "fault injection: packets marked ECN CE, duplicates included", ByLink, true},
	SameHostPkts:        {"samehost_pkts", "packets sent to a same-host peer through shared memory", ByLink, true},
	SameHostDrops:       {"samehost_drops", "same-host packets dropped because the peer's ring was full", ByLink, true},
	ColdWrites:          {"cold_writes", "RDMA WRITE messages placed with non-temporal stores", ByDevice, true},
	ColdSources:         {"cold_sources", "messages sent from a source likely out of cache, prefetched as sent", ByDevice, true},
	ConnectedPorts:      {"connected_ports", "per-QP UDP source-port sockets connected to their peer", ByLink, true},
	UnconnectedPorts:    {"unconnected_ports", "per-QP UDP source-port sockets that could not be connected or whose IPv4 ID counter could not be learned", ByLink, true},
	IDRecoveries:        {"ipv4_id_recoveries", "IPv4 packets whose IP ID was not the expected one and was recovered from the ICRC", ByLink, true},
	FlowSockets:         {"flow_sockets", "UDP sockets connected to a connection's peer for its datagrams (0 or 1)", ByLink, true},
	FlowDatagrams:       {"flow_datagrams", "datagrams read from the flow socket", ByLink, true},
	LoneSends:           {"lone_sends", "UDP datagrams sent alone by sendto from a connected port socket", ByLink, true},
	SegmentOptions:      {"segment_options", "times a port socket's UDP_SEGMENT option was set for lone sends", ByLink, true},
	EarlyGoBacks:        {"early_go_backs", "retransmissions after a silence shorter than the ACK timeout; not retries", ByDevice, true},
	SpuriousGoBacks:     {"spurious_go_backs", "go-backs after a silence that a response to the first transmission proved needless", ByDevice, true},

	LinkSentPkts:    {"link_sent_pkts", "packets the link accepted for sending", ByLink, false},
	LinkSentBytes:   {"link_sent_bytes", "bytes of the packets the link accepted for sending", ByLink, false},
	LinkRcvdPkts:    {"link_rcvd_pkts", "packets the link returned from its reads", ByLink, false},
	LinkRcvdBytes:   {"link_rcvd_bytes", "bytes of the packets the link returned from its reads", ByLink, false},
	LinkMalformed:   {"link_malformed", "received datagrams shorter than BTH+ICRC, or from another address family", ByLink, false},
	LinkOversized:   {"link_oversized", "received datagrams longer than the read buffer", ByLink, false},
	LinkSendErrors:  {"link_send_errors", "writes that stopped on an error", ByLink, false},
	PortFallbacks:   {"port_fallbacks", "packets sent from the link's own port because no socket could be had for theirs", ByLink, false},
	FaultSeen:       {"fault_seen", "fault injection: packets that entered the stage", ByLink, false},
	FaultDropChance: {"fault_drop_chance", "fault injection: packets dropped by chance or by a rule", ByLink, false},
	FaultRuleHits:   {"fault_rule_hits", "fault injection: packets a rule acted on", ByLink, false},
	FaultOverflow:   {"fault_overflow", "fault injection: packets dropped because the stage held its limit", ByLink, false},
	FaultDiscarded:  {"fault_discarded", "fault injection: held packets lost to Close or to a failed send", ByLink, false},
}

// Info returns what counter c counts and who counts it.
func (c Counter) Info() Info { return table[c] }

func (c Counter) String() string { return table[c].Name }

// All returns every counter in order.
func All() []Counter {
	cs := make([]Counter, NumCounters)
	for i := range cs {
		cs[i] = Counter(i)
	}
	return cs
}

// published and fromLink are derived from table.
var published, fromLink = func() (p, l []Counter) {
	for c := range NumCounters {
		if table[c].Published {
			p = append(p, c)
			if table[c].Source == ByLink {
				l = append(l, c)
			}
		}
	}
	return p, l
}()

// PublishedCounters returns the counters a device publishes, in order.
func PublishedCounters() []Counter { return published }

// FromLink returns the published counters a device copies from its link.
func FromLink() []Counter { return fromLink }

// Counters is a set of counters that any goroutine may increment. The zero
// value is not usable; make one with New or Publish.
type Counters struct {
	v *[NumCounters]atomic.Uint64
}

// New returns counters in ordinary memory, visible only to this process.
func New() *Counters { return &Counters{v: new([NumCounters]atomic.Uint64)} }

// fromBytes places counters in b (8-byte aligned, NumCounters*8 bytes).
func fromBytes(b []byte) *Counters {
	return &Counters{v: (*[NumCounters]atomic.Uint64)(unsafe.Pointer(&b[0]))}
}

// Inc adds one to counter k. A nil *Counters ignores it.
func (c *Counters) Inc(k Counter) {
	if c != nil {
		c.v[k].Add(1)
	}
}

// Add adds n to counter k.
func (c *Counters) Add(k Counter, n uint64) {
	if c != nil && n != 0 {
		c.v[k].Add(n)
	}
}

// Set sets counter k (for counts kept elsewhere, such as the link's).
func (c *Counters) Set(k Counter, v uint64) {
	// A store only when the value changes: the cache line then stays
	// shared between the cores that read it.
	if c != nil && c.v[k].Load() != v {
		c.v[k].Store(v)
	}
}

// Get returns counter k.
func (c *Counters) Get(k Counter) uint64 { return c.v[k].Load() }

// Snapshot is a copy of all counters.
type Snapshot [NumCounters]uint64

// Snapshot copies the counters.
func (c *Counters) Snapshot() Snapshot {
	var s Snapshot
	for i := range s {
		s[i] = c.v[i].Load()
	}
	return s
}

// Map returns the snapshot's published counters as name → value.
func (s Snapshot) Map() map[string]uint64 {
	m := make(map[string]uint64, len(published))
	for _, c := range published {
		m[table[c].Name] = s[c]
	}
	return m
}

// PrintCountersEnv names the environment variable that, set to 1, has
// goroce's tools print their device's counters on stderr at exit (Line).
const PrintCountersEnv = "GOROCE_PRINT_COUNTERS"

// Line formats counters, name → value, as the tools print them at exit
// with PrintCountersEnv set: "counters:" and name=value pairs sorted by
// name, on one line.
func Line(c map[string]uint64) string {
	var b strings.Builder
	b.WriteString("counters:")
	for _, name := range slices.Sorted(maps.Keys(c)) {
		fmt.Fprintf(&b, " %s=%d", name, c[name])
	}
	b.WriteByte('\n')
	return b.String()
}
