package perftest

import (
	"iter"
	"math/bits"
	"time"

	"github.com/goroce/goroce/verbs"
)

// bwClient runs one bandwidth measurement from the posting side
// (run_iter_bw): every QP keeps up to TxDepth WRs outstanding, every
// CQMod-th WR (and the last) is signaled, and each completion stands for
// the CQMod WRs before it.
func (s *side) bwClient(size int) (*bwTimes, error) {
	p := s.p
	n := len(s.qps)
	iters := p.Iters
	var dc *durationClock
	t := &bwTimes{size: size, noPeak: p.NoPeak || p.Iters > 20000, cqMod: p.CQMod, postList: p.PostList}
	if p.Duration > 0 {
		dc, iters = newDurationClock(p), 1<<40
		t.noPeak = true
	}
	total := iters * n
	if t.noPeak {
		t.posted, t.completed = make([]int64, 1), make([]int64, 1)
	} else {
		t.posted, t.completed = make([]int64, total), make([]int64, total)
	}
	scnt, ccnt := make([]int, n), make([]int, n)
	room := newQPSet(n)
	wrs := make([][]verbs.SendWR, n)
	for i := range wrs {
		wrs[i] = make([]verbs.SendWR, p.PostList)
		for k := range wrs[i] {
			wrs[i][k] = s.sendWR(i, size)
		}
	}
	totS, totC := 0, 0
	sampling, sampled := false, 0
	if t.noPeak && dc == nil {
		t.posted[0] = s.now()
	}
	// perftest's software rate limiter: bursts of BurstSize WRs, a gap
	// apart, so that the WR rate is the limit.
	var gap time.Duration
	var nextBurst time.Time
	burst := 0
	if p.RateLimit > 0 {
		pps := p.RateLimit // 'p'
		switch p.RateUnits {
		case 'M':
			pps = p.RateLimit * 1048576 / float64(size)
		case 'g':
			pps = p.RateLimit * 1e9 / (8 * float64(size))
		}
		gap = time.Duration(float64(time.Second) * float64(p.BurstSize) / pps)
		nextBurst = time.Now()
	}
	want := -1 // completions to wait for once posting stops; -1: all posted
	for totS < total || totC < want || want < 0 && totC < totS {
		if dc != nil && totS < total {
			now := time.Now()
			switch {
			case !sampling && sampled == 0 && !now.Before(dc.sampleStart):
				sampling, t.posted[0] = true, s.now()
			case sampling && !now.Before(dc.sampleEnd):
				sampling, t.completed[0] = false, s.now()
			case !now.Before(dc.end):
				// Stop posting, and wait only for what a completion will
				// report: WRs after a QP's last signaled one never do.
				total, want = totS, 0
				for i := range n {
					want += scnt[i] / p.CQMod * p.CQMod
				}
			}
		}
		// perftest visits every QP on each pass and posts to those with
		// room; a QP's room comes only from its completions, so the pass
		// visits the QPs in room, in the same order, and makes the same
		// posts without a check of every QP on every pass, which with
		// hundreds of QPs is a visible share of the client's CPU.
		// Chosen by measurement: docs/design/tuning.md#qp-set.
		for i := range room.members() {
			if gap > 0 && burst == 0 { // the software rate limiter: one burst per gap
				if time.Now().Before(nextBurst) {
					continue
				}
				nextBurst, burst = nextBurst.Add(gap), p.BurstSize
				if nextBurst.Before(time.Now()) {
					nextBurst = time.Now().Add(gap)
				}
			}
			for totS < total && scnt[i] < iters && scnt[i]-ccnt[i]+p.PostList <= p.TxDepth && (gap == 0 || burst > 0) {
				for k := range wrs[i] {
					c := scnt[i] + k
					wrs[i][k].Flags &^= verbs.SendSignaled
					if c%p.CQMod == p.CQMod-1 || c == iters-1 {
						wrs[i][k].Flags |= verbs.SendSignaled
					}
				}
				if !t.noPeak {
					for k := range p.PostList {
						t.posted[totS+k] = s.now()
					}
				}
				if _, err := s.qps[i].PostSend(wrs[i]); err != nil {
					return nil, err
				}
				scnt[i] += p.PostList
				totS += p.PostList
				if gap > 0 {
					burst = max(burst-p.PostList, 0)
				}
			}
			if scnt[i] >= iters || scnt[i]-ccnt[i]+p.PostList > p.TxDepth {
				room.remove(i) // until a completion makes room
			}
		}
		if totC >= totS || want >= 0 && totC >= want {
			continue
		}
		if gap > 0 {
			// Between bursts, poll only while a signaled WR is out: the
			// unsignaled tail of a burst completes with the next one.
			signaled := 0
			for i := range n {
				if scnt[i] == iters {
					signaled += scnt[i]
				} else {
					signaled += scnt[i] / p.CQMod * p.CQMod
				}
			}
			if totC >= signaled {
				time.Sleep(time.Until(nextBurst))
				continue
			}
		}
		wcs, err := s.poll(s.scq, s.wc, time.Time{})
		if err != nil {
			return nil, err
		}
		for _, wc := range wcs {
			i := int(wc.WRID)
			k := p.CQMod
			if r := ccnt[i] % p.CQMod; r != 0 || scnt[i]-ccnt[i] < k {
				k = min(k, scnt[i]-ccnt[i]) // the last, short group
			}
			ccnt[i] += k
			totC += k
			room.add(i)
			if sampling {
				sampled += k
			}
			if !t.noPeak {
				t.completed[min(totC, total)-1] = s.now()
			}
		}
	}
	switch {
	case dc != nil:
		if t.completed[0] == 0 {
			t.completed[0] = s.now()
		}
		t.iters = sampled
	case t.noPeak:
		t.completed[0] = s.now()
		t.iters = total
	default:
		t.iters = total
	}
	return t, nil
}

// qpSet is a set of QP indexes, a bit each, which iterates in index
// order.
type qpSet []uint64

// newQPSet returns the set of QPs 0 to n-1.
func newQPSet(n int) qpSet {
	s := make(qpSet, (n+63)/64)
	for i := range n {
		s.add(i)
	}
	return s
}

func (s qpSet) add(i int)    { s[i>>6] |= 1 << (i & 63) }
func (s qpSet) remove(i int) { s[i>>6] &^= 1 << (i & 63) }

// members yields the QPs in s in index order; the loop may remove the
// QP it is given.
func (s qpSet) members() iter.Seq[int] {
	return func(yield func(int) bool) {
		for wi, word := range s {
			for ; word != 0; word &= word - 1 {
				if !yield(wi<<6 + bits.TrailingZeros64(word)) {
					return
				}
			}
		}
	}
}

// prepare tops every QP's receive queue up to RxDepth before a send
// test's barrier (ctx_set_recv_wqes), so the peer's first SEND finds a
// receive.
func (s *side) prepare() error {
	if s.p.Verb != Send || (s.client && !s.p.Duplex && s.p.Kind == BW) {
		return nil
	}
	for i := range s.qps {
		if err := s.postRecvs(i, s.p.RxDepth-s.rq[i]); err != nil {
			return err
		}
	}
	return nil
}

// bwServer receives a send bandwidth test's messages (run_iter_bw_server)
// and keeps the receive queues full: the clock starts at the first receive
// and stops at the last. A timed run starts its clock at the first
// receive and samples as the sender does.
func (s *side) bwServer(size int) (*bwTimes, error) {
	p := s.p
	n := len(s.qps)
	wcbuf := make([]verbs.WC, pollBatch)
	t := &bwTimes{size: size, noPeak: true, posted: make([]int64, 1), completed: make([]int64, 1), cqMod: 1, postList: 1}
	total := p.Iters * n
	got := make([]int, n)
	var dc *durationClock
	rcnt := 0
	sampling, sampled := false, 0
	for p.Duration > 0 || rcnt < total {
		until := time.Time{}
		if dc != nil {
			now := time.Now()
			switch {
			case !sampling && sampled == 0 && !now.Before(dc.sampleStart):
				sampling, t.posted[0] = true, s.now()
			case sampling && !now.Before(dc.sampleEnd):
				sampling, t.completed[0] = false, s.now()
			case !now.Before(dc.end):
				t.iters = sampled
				return t, nil
			}
			until = now.Add(10 * time.Millisecond)
		}
		wcs, err := s.poll(s.rcq, wcbuf, until)
		if err == errTimeUp {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, wc := range wcs {
			if rcnt == 0 {
				if p.Duration > 0 {
					dc = newDurationClock(p)
				} else {
					t.posted[0] = s.now()
				}
			}
			rcnt++
			if sampling {
				sampled++
			}
			i := int(wc.WRID)
			got[i]++
			s.rq[i]--
			if p.Duration > 0 || got[i]+s.rq[i] < p.Iters {
				if err := s.postRecvs(i, 1); err != nil {
					return nil, err
				}
			}
		}
	}
	t.completed[0] = s.now()
	t.iters = total
	return t, nil
}
