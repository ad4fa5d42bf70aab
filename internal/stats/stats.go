// Package stats keeps a device's counters, with the names Linux rxe gives
// its hw_counters (/sys/class/infiniband/<dev>/ports/1/hw_counters), plus
// byte and drop counts. The counters of a device live in a small file
// mapped into memory, so that another process — `goroce stats` — can read
// them while the device runs, the way rxe's show up in sysfs.
package stats

import (
	"sync/atomic"
	"unsafe"
)

// Counter names one counter.
type Counter int

// The counters. The first fifteen are rxe's, in rxe's order.
const (
	SentPkts            Counter = iota // packets sent
	RcvdPkts                           // packets received and accepted (ICRC correct, well formed, for a QP)
	DuplicateRequest                   // requests the responder had already executed
	OutOfSeqRequest                    // requests beyond the expected PSN
	RcvdRNRErr                         // RNR NAKs received
	SendRNRErr                         // RNR NAKs sent
	RcvdSeqErr                         // PSN sequence error NAKs received
	AckDeferred                        // ACKs not sent because a later one covered them
	RetryExceededErr                   // WQEs failed with RETRY_EXC_ERR
	RetryRNRExceededErr                // WQEs failed with RNR_RETRY_EXC_ERR
	CompleterRetryErr                  // retransmissions after a timeout or sequence NAK
	SendErr                            // packets the socket refused
	LinkDowned                         // always 0: a UDP path has no link state
	RDMASends                          // SEND work requests completed
	RDMARecvs                          // receive work requests completed
	SentBytes                          // UDP payload bytes sent
	RcvdBytes                          // UDP payload bytes received and accepted
	ICRCErrors                         // packets dropped for a bad ICRC
	Malformed                          // packets dropped as malformed or for no QP
	SocketDrops                        // datagrams the kernel dropped on the socket (full receive buffer)
	FaultDropped                       // fault injection (Config.Fault): packets dropped on purpose
	FaultDuplicated                    //   … sent twice
	FaultReordered                     //   … held back behind later ones
	FaultCorrupted                     //   … with a bit flipped
	FaultDelayed                       //   … delayed
	FaultCEMarked                      //   … marked ECN CE
	SameHostPkts                       // packets sent to a same-host peer through shared memory (Config.SameHost)
	SameHostDrops                      //   … dropped because the peer's ring was full
	ColdWrites                         // RDMA WRITE messages placed with non-temporal stores (transport.Placement)
	ColdSources                        // messages sent from a source likely out of cache, prefetched as sent (transport.Placement)
	ConnectedPorts                     // per-QP UDP source-port sockets connected to their peer
	UnconnectedPorts                   //   … that could not be (or whose IPv4 ID counter could not be learned)
	IDRecoveries                       // IPv4 packets whose IP ID was not the expected one and was recovered from the ICRC
	FlowSockets                        // UDP sockets connected to a connection's peer for its datagrams (0 or 1)
	FlowDatagrams                      //   … and the datagrams read from them
	LoneSends                          // UDP datagrams sent alone by sendto from a connected port socket
	SegmentOptions                     //   … and the times a socket's UDP_SEGMENT option was set for them
	NumCounters
)

var names = [NumCounters]string{
	"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err",
	"send_rnr_err", "rcvd_seq_err", "ack_deferred", "retry_exceeded_err", "retry_rnr_exceeded_err",
	"completer_retry_err", "send_err", "link_downed", "rdma_sends", "rdma_recvs",
	"sent_bytes", "rcvd_bytes", "icrc_errors", "malformed", "socket_drops",
	"fault_dropped", "fault_duplicated", "fault_reordered", "fault_corrupted", "fault_delayed", "fault_ce_marked",
	"samehost_pkts", "samehost_drops", "cold_writes", "cold_sources",
	"connected_ports", "unconnected_ports", "ipv4_id_recoveries",
	"flow_sockets", "flow_datagrams", "lone_sends", "segment_options",
}

func (c Counter) String() string { return names[c] }

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

// Map returns the snapshot as name → value.
func (s Snapshot) Map() map[string]uint64 {
	m := make(map[string]uint64, NumCounters)
	for i, v := range s {
		m[names[i]] = v
	}
	return m
}
