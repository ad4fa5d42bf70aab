package verbs

import (
	"fmt"

	"github.com/goroce/goroce/internal/transport"
)

// SRQ is a shared receive queue (IBA 10.2.9): several QPs of one PD take
// their receive WQEs from it.
type SRQ struct {
	pd     *PD
	rq     *transport.RecvQueue
	maxSGE int
}

// SRQInitAttr are an SRQ's creation attributes (struct ibv_srq_init_attr).
type SRQInitAttr struct {
	MaxWR  int
	MaxSGE int
	// Limit arms the limit event at creation: SRQ_LIMIT_REACHED fires once
	// when fewer than Limit WQEs remain. 0 leaves it disarmed.
	Limit int
}

// CreateSRQ creates a shared receive queue.
func (pd *PD) CreateSRQ(attr SRQInitAttr) (*SRQ, error) {
	if attr.MaxWR < 1 || attr.MaxWR > maxSRQWR {
		return nil, fmt.Errorf("verbs: SRQ max_wr %d outside 1..%d", attr.MaxWR, maxSRQWR)
	}
	if attr.MaxSGE < 1 || attr.MaxSGE > maxSRQSGE {
		return nil, fmt.Errorf("verbs: SRQ max_sge %d outside 1..%d", attr.MaxSGE, maxSRQSGE)
	}
	s := &SRQ{pd: pd, rq: transport.NewRecvQueue(attr.MaxWR), maxSGE: attr.MaxSGE}
	if err := s.ArmLimit(attr.Limit); err != nil {
		return nil, err
	}
	return s, nil
}

// ArmLimit arms the limit event (ibv_modify_srq with IBV_SRQ_LIMIT): once
// fewer than limit WQEs remain, one SRQ_LIMIT_REACHED event is sent and the
// limit disarms. 0 disarms it.
func (s *SRQ) ArmLimit(limit int) error {
	if limit < 0 || limit > s.rq.Depth() {
		return fmt.Errorf("verbs: SRQ limit %d outside 0..%d", limit, s.rq.Depth())
	}
	s.rq.SetLimit(limit, func() { s.pd.dev.event(AsyncEvent{Type: EventSRQLimitReached, SRQ: s}) })
	return nil
}

// Len returns the number of posted WQEs not yet taken.
func (s *SRQ) Len() int { return s.rq.Len() }

// PostRecv posts receive work requests. It returns the index of the first
// one it rejected (len(wrs) if none) and why.
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) {
	for i := range wrs {
		if len(wrs[i].SGL) > s.maxSGE {
			return i, fmt.Errorf("verbs: SRQ post_recv WR %d: %d SGEs, max_sge is %d", i, len(wrs[i].SGL), s.maxSGE)
		}
	}
	n, err := s.rq.Post(wrs)
	if err != nil {
		return n, fmt.Errorf("verbs: SRQ post_recv WR %d: %w (depth %d)", n, err, s.rq.Depth())
	}
	return n, nil
}

// Destroy releases the SRQ.
func (s *SRQ) Destroy() error { return nil }
