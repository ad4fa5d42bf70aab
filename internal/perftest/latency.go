package perftest

import (
	"context"
	"runtime"
	"time"

	"github.com/goroce/goroce/verbs"
)

// speaksFirst says whether this side sends the first message of a
// latency ping-pong. perftest's order: the client in ib_send_lat
// (run_iter_lat_send), the server in ib_write_lat (run_iter_lat_write);
// the other side waits for it.
func speaksFirst(v Verb, client bool) bool { return client == (v == Send) }

// latency runs a latency test's loop and returns the post timestamps: for
// write and send, a ping-pong where each side answers the other's message
// (run_iter_lat_write, run_iter_lat_send); for read and atomic, the client
// posts one WR at a time and waits for it (run_iter_lat).
func (s *side) latency(size int) ([]int64, int, int64, error) {
	p := s.p
	iters := p.Iters
	var dc *durationClock
	if p.Duration > 0 {
		dc, iters = newDurationClock(p), 1<<40
	}
	var posted []int64
	if dc == nil {
		posted = make([]int64, 0, iters)
	}
	wr := []verbs.SendWR{s.sendWR(0, size)}
	wr[0].Flags |= verbs.SendSignaled
	count, start, elapsed := 0, int64(0), int64(0)
	sampling := false
	tick := func() bool { // false when a timed run is over
		if dc == nil {
			return true
		}
		now := time.Now()
		switch {
		case !sampling && count == 0 && !now.Before(dc.sampleStart):
			sampling, start = true, s.now()
		case sampling && !now.Before(dc.sampleEnd):
			sampling, elapsed = false, s.now()-start
			return false
		}
		return true
	}
	pollByte := s.buf[s.dst(0)+size-1:]
	postByte := s.buf[s.src(0)+size-1:]
	until := time.Time{}
	if dc != nil {
		until = dc.end
	}
	// waitWrite waits for the peer's next RDMA WRITE of size bytes:
	// s.consumed counts the bytes of those already seen, so one that lands
	// before this side starts waiting (the peer moves on first) is not
	// missed. It counts bytes, not messages: a goroce peer over UDP sends
	// a WRITE as one message per packet (verbs.Config.WholeWrites), and
	// the poll byte is read only once every one of them is counted.
	arrived := func() bool { return s.mr.RemoteWriteBytes()-s.consumed >= uint64(size) }
	waitWrite := func(want byte) error {
		var deadline time.Time
		for spins := 0; ; spins++ {
			seen := s.mr.RemoteWrites() // before the bytes: one counted after them changes it
			if arrived() {
				s.consumed += uint64(size)
				if pollByte[0] == want {
					return nil
				}
				continue
			}
			if s.busy > 0 && s.dev.BusyPoll(s.busy, arrived) {
				continue
			}
			if spins < spinPolls && !p.Events {
				runtime.Gosched()
				continue
			}
			// The deadline is taken when the wait first blocks, not
			// before each message: time.Now reads two clocks, on the
			// way from the peer's message to the answer (internal/stamp).
			if deadline.IsZero() {
				deadline = time.Now().Add(stallTimeout)
				if !until.IsZero() {
					deadline = until
				}
			}
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			_, err := s.mr.WaitRemoteWrites(ctx, seen)
			cancel()
			if err != nil {
				if !until.IsZero() {
					return errTimeUp
				}
				return s.stalled()
			}
		}
	}
	// send posts the WR, stamps it and waits for its completion; a timed
	// run's last message may go unanswered (errTimeUp), as in perftest.
	send := func() error {
		if dc == nil {
			posted = append(posted, s.now())
		}
		if _, err := s.qps[0].PostSend(wr); err != nil {
			return err
		}
		if _, err := s.poll(s.scq, s.wc, until); err != nil {
			return err
		}
		if sampling {
			count++
		}
		return nil
	}
	switch {
	case p.Verb == Write || p.Verb == Send:
		first := speaksFirst(p.Verb, s.client)
		rcnt := 0
		recv := func() error {
			rcnt++
			if p.Verb == Write {
				return waitWrite(byte(rcnt))
			}
			_, err := s.poll(s.rcq, s.wc, until)
			if err == nil {
				s.rq[0]--
				err = s.postRecvs(0, 1)
			}
			return err
		}
		scnt := 0
		for scnt < iters {
			if !tick() {
				break
			}
			if scnt > 0 || !first {
				err := recv()
				if err == errTimeUp {
					break
				}
				if err != nil {
					return nil, 0, 0, err
				}
			}
			scnt++
			postByte[0] = byte(scnt)
			if err := send(); err == errTimeUp {
				break
			} else if err != nil {
				return nil, 0, 0, err
			}
		}
		if first && dc == nil && rcnt < scnt {
			// The other side's last answer: perftest waits for it too, so
			// that the QP is still there to acknowledge it.
			if err := recv(); err != nil {
				return nil, 0, 0, err
			}
		}
	default: // read, atomic: only the client posts
		for c := 0; c < iters && tick(); c++ {
			if err := send(); err == errTimeUp {
				break
			} else if err != nil {
				return nil, 0, 0, err
			}
		}
	}
	if dc != nil && sampling {
		elapsed = s.now() - start
	}
	return posted, count, elapsed, nil
}
