package perftest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/verbs"
)

const (
	spinPolls    = 1                      // polls before sleeping: spinning starves the peer on small hosts
	busyPoll     = 200 * time.Microsecond // a latency test's spin per wait before it blocks: a round trip and then some
	stallTimeout = 60 * time.Second
)

// errStalled is returned when no completion arrives for stallTimeout.
var errStalled = errors.New("no completion for 60 s: the peer stopped answering")

// stalled returns errStalled with the QPs' transport state when
// GOROCE_DEBUG is set.
func (s *side) stalled() error {
	if os.Getenv("GOROCE_DEBUG") == "" {
		return errStalled
	}
	var b strings.Builder
	for _, qp := range s.qps {
		fmt.Fprintf(&b, "\n QP %#x: %s", qp.QPN(), qp.Debug())
	}
	fmt.Fprintf(&b, "\n MR remote writes %d (%d bytes, %d seen)", s.mr.RemoteWrites(), s.mr.RemoteWriteBytes(), s.consumed)
	return fmt.Errorf("%w%s", errStalled, b.String())
}

// errTimeUp ends a wait when a timed run (-D) is over.
var errTimeUp = errors.New("time is up")

// busySpin is how long a wait of p's test busy-polls the device before it
// blocks, the same on both sides: perftest's tests poll their CQs, and
// here the poll drives the device too (verbs.Device.BusyPoll), which
// saves the wake-ups that are most of a small message's latency. With -e
// a wait blocks at once.
//
// A bandwidth test polls in the tools' own processes (Params.PollBW), on
// both sides, unless -b. On the side that sends the data (the client of
// ib_write_bw and ib_send_bw) polling saves a wake-up per batch of ACKs;
// on the side that receives it, the server of ib_send_bw and the client
// of ib_read_bw and ib_atomic_bw, the wake-up of the reader for each
// batch of data, since a poller on one P takes the socket from the reader
// (verbs' dispatcher.handOff). With -b, where both sides send and
// receive, the waits block: two spinning processes take from each other
// the CPUs their devices need, and large messages slow down. goroce bench
// has both ends in one process, and its waits block unless -poll.
// Chosen by measurement: docs/design/tuning.md#bandwidth-polling.
func (p *Params) busySpin() time.Duration {
	switch {
	case p.Events:
		return 0
	case p.Kind == Lat:
		return busyPoll
	case p.PollBW && !p.Duplex:
		return busyPoll
	}
	return 0
}

// serve runs wait, an out-of-band wait during which this side only
// answers its peer's requests: the server of the RDMA tests (ib_write_bw,
// ib_read_lat, ...), whose HCA answers each WRITE, READ or atomic while
// perftest's server sleeps. When this side's waits busy-poll (busySpin),
// a goroutine polls the device meanwhile, so that each request finds the
// responder running rather than a reader asleep, to be woken from the
// other CPU: that wake-up is most of a small READ's or atomic's round
// trip.
// Chosen by measurement: docs/design/tuning.md#serve-polling.
func (s *side) serve(wait func() error) error {
	if s.busy == 0 {
		return wait()
	}
	var stop atomic.Bool
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for !stop.Load() {
			s.dev.BusyPoll(time.Hour, stop.Load)
		}
		s.dev.EndPoll()
	}()
	err := wait()
	stop.Store(true)
	<-polled
	return err
}

// poll returns at least one completion from cq: it spins a while, then
// sleeps on the CQ's completion channel, and gives up after stallTimeout.
// A non-zero until ends the wait with errTimeUp.
func (s *side) poll(cq *verbs.CQ, wcs []verbs.WC, until time.Time) ([]verbs.WC, error) {
	ch := s.sch
	if cq == s.rcq {
		ch = s.rch
	}
	deadline := time.Time{}
	for spins := 0; ; spins++ {
		if n := cq.Poll(wcs); n > 0 {
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.WCSuccess {
					return nil, fmt.Errorf("completion with error: %v (QP 0x%x, wr_id %d)", wc.Status, wc.QPNum, wc.WRID)
				}
			}
			return wcs[:n], nil
		}
		if !until.IsZero() && time.Now().After(until) {
			return nil, errTimeUp
		}
		if s.busy > 0 && s.dev.BusyPoll(s.busy, func() bool { return cq.Len() > 0 }) {
			continue
		}
		if spins < spinPolls && !s.p.Events {
			runtime.Gosched()
			continue
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(stallTimeout)
		} else if time.Now().After(deadline) {
			return nil, s.stalled()
		}
		cq.ReqNotify(false)
		if cq.Len() > 0 {
			continue
		}
		wait := 100 * time.Millisecond
		if !until.IsZero() {
			wait = min(wait, max(time.Until(until), 0))
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		ch.Get(ctx)
		cancel()
	}
}

// durationClock is perftest's alarm-driven state machine for -D: warm up
// for the margin, sample for duration − 2 × margin, cool down for the
// margin.
type durationClock struct {
	sampleStart, sampleEnd, end time.Time
}

func newDurationClock(p *Params) *durationClock {
	now := time.Now()
	m := time.Duration(p.Margin) * time.Second
	return &durationClock{sampleStart: now.Add(m), sampleEnd: now.Add(time.Duration(p.Duration)*time.Second - m),
		end: now.Add(time.Duration(p.Duration) * time.Second)}
}
