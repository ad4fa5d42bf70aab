package link

import "github.com/goroce/goroce/internal/stats"

// RxCount tallies one read before it is added to a link's counters: hot
// paths add once per batch, not once per packet.
type RxCount struct {
	Packets, Bytes, ICRC, Malformed, Oversized uint64
	Recovered                                  uint64 // IPv4 IDs recovered from the ICRC
}

// AddTo adds the tally to c.
func (r *RxCount) AddTo(c *stats.Counters) {
	if r.Packets != 0 {
		c.Add(stats.LinkRcvdPkts, r.Packets)
		c.Add(stats.LinkRcvdBytes, r.Bytes)
	}
	c.Add(stats.ICRCErrors, r.ICRC)
	c.Add(stats.LinkMalformed, r.Malformed)
	c.Add(stats.LinkOversized, r.Oversized)
	c.Add(stats.IDRecoveries, r.Recovered)
}

// CountTx adds a write of packets and bytes to c, and its error if any.
func CountTx(c *stats.Counters, packets, bytes uint64, err error) {
	if packets != 0 {
		c.Add(stats.LinkSentPkts, packets)
		c.Add(stats.LinkSentBytes, bytes)
	}
	if err != nil {
		c.Inc(stats.LinkSendErrors)
	}
}
