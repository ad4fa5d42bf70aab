package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/verbs"
)

const (
	cycleBuffer  = 4096 // sysconf(_SC_PAGESIZE), perftest's cycle buffer
	cacheLine    = 64
	minRNRTimer  = 12                     // perftest's MIN_RNR_TIMER
	hopLimit     = 0xff                   // perftest's GRH hop limit on RoCE
	udQKey       = 0x11111111             // perftest's DEF_QKEY
	grhLen       = 40                     // UD receive buffers start with the GRH (perftest's UD_ADDITION)
	pollBatch    = 16                     // CTX_POLL_BATCH
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

// side is one end of a test: its device, memory, CQs and QPs.
type side struct {
	p        *Params
	client   bool
	out      io.Writer
	dev      *verbs.Device
	pd       *verbs.PD
	mr       *verbs.MR
	buf      []byte
	half     int // bytes per QP half-buffer: the source half, then the target half
	scq      *verbs.CQ
	rcq      *verbs.CQ
	sch      *verbs.CompChannel
	rch      *verbs.CompChannel
	qps      []*verbs.QP
	ahs      []*verbs.AH // UD: one per QP, to the peer's QP
	my, rem  []Dest
	mtu      verbs.MTU
	gidIdx   int
	wc       []verbs.WC
	rq       []int          // receives outstanding per QP
	consumed uint64         // bytes of peer WRITEs a latency test has seen (MR.RemoteWriteBytes)
	rwr      []verbs.RecvWR // reused by postRecvs
	t0       time.Time
	busy     time.Duration // how long a wait busy-polls the device before it blocks; 0: it does not
}

func (s *side) now() int64 { return int64(time.Since(s.t0)) }

// initBuffer fills a test's buffer before the test, as perftest's
// initialize_buffer_content does: zeros for the WRITE latency test, which
// polls its buffer for the peer's writes, random bytes for every other
// test. Either way every page is written, so the test itself never waits
// on the kernel for a first touch (a Go slice's pages are mapped lazily;
// at -q 1024 a 64 KiB test would fault in 256 MiB while it measures).
func initBuffer(b []byte, p *Params) {
	if p.Verb == Write && p.Kind == Lat {
		clear(b)
		return
	}
	r := rand.NewChaCha8([32]byte{})
	r.Read(b)
}

// bufferSize returns the bytes of a QP's half-buffer and of the whole
// buffer for p: per QP a source and a target half of the message size (at
// least a cycle buffer) and a cache line of slack, which holds a UD
// receive's GRH. A buffer larger than the machine's memory (mem, 0 if
// unknown) is an error, as perftest's failed allocation is ("Couldn't
// allocate work buf"), rather than a crash of the Go runtime.
func bufferSize(p *Params, mem uint64) (half, total int, err error) {
	half = max(p.Size, cycleBuffer) + cacheLine
	half = (half + cacheLine - 1) / cacheLine * cacheLine
	need := 2 * uint64(half) * uint64(p.QPs) // at most 2 × (2^31 + 128) × 2^16: no overflow
	if need > math.MaxInt || mem > 0 && need > mem {
		return 0, 0, fmt.Errorf("couldn't allocate the work buffer: %d QPs with 2 halves of %d bytes each need %d bytes, more than this machine's memory (%d bytes)",
			p.QPs, half, need, mem)
	}
	return half, int(need), nil
}

// open creates the device's objects for p (perftest's ctx_init and
// set_up_connection): one MR holds, per QP, a source half and a target
// half, and the target half's address is what the peer is told.
func open(p *Params, dev *verbs.Device, client bool, out io.Writer) (*side, error) {
	s := &side{p: p, client: client, out: out, dev: dev, t0: time.Now(), wc: make([]verbs.WC, pollBatch), busy: p.busySpin()}
	half, total, err := bufferSize(p, physicalMemory())
	if err != nil {
		return nil, err
	}
	s.half = half
	if s.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	s.buf = make([]byte, total)
	initBuffer(s.buf, p)
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if s.mr, err = s.pd.RegMR(s.buf, access); err != nil {
		return nil, err
	}
	s.sch, s.rch = verbs.NewCompChannel(), verbs.NewCompChannel()
	sendDepth := p.TxDepth * p.QPs
	if p.Verb == Send && p.Duplex {
		sendDepth += p.RxDepth * p.QPs
	}
	if s.scq, err = dev.CreateCQ(max(sendDepth, 1), s.sch); err != nil {
		return nil, err
	}
	if s.rcq, err = dev.CreateCQ(max(p.RxDepth*p.QPs, 1), s.rch); err != nil {
		return nil, err
	}
	s.gidIdx = p.GIDIndex
	if s.gidIdx < 0 {
		s.gidIdx = dev.GIDIndex()
	}
	gid, err := dev.QueryGID(s.gidIdx)
	if err != nil {
		return nil, err
	}
	outReads := 1
	if p.Verb == Read || p.Verb == Atomic {
		if p.OutReads == 0 {
			p.OutReads = dev.QueryDevice().MaxQPRdAtom
		}
		outReads = p.OutReads
	}
	for i := range p.QPs {
		qp, err := s.pd.CreateQP(verbs.QPInitAttr{Type: qpType(p.Conn), SendCQ: s.scq, RecvCQ: s.rcq,
			Cap: verbs.QPCap{MaxSendWR: p.TxDepth, MaxRecvWR: p.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: p.Inline}})
		if err != nil {
			return nil, err
		}
		// INIT (perftest's ctx_modify_qp_to_init): UD takes a Q_Key, the
		// connected services their remote access rights (UC: writes only).
		attr := verbs.QPAttr{State: verbs.QPSInit, PortNum: uint8(p.IBPort)}
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
		switch p.Conn {
		case UD:
			attr.QKey, mask = udQKey, mask|verbs.AttrQKey
		case UC:
			attr.AccessFlags, mask = verbs.AccessRemoteWrite, mask|verbs.AttrAccessFlags
		default:
			attr.AccessFlags = verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
			mask |= verbs.AttrAccessFlags
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return nil, err
		}
		s.qps = append(s.qps, qp)
		s.rq = append(s.rq, 0)
		s.my = append(s.my, Dest{OutReads: outReads, QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff, RKey: s.mr.RKey(),
			VAddr: s.mr.Addr() + uint64((2*i+1)*s.half), GID: gid})
	}
	return s, nil
}

func (s *side) local() []Dest      { return s.my }
func (s *side) setRemote(d []Dest) { s.rem = d }

// close releases the device's objects; the device itself is the caller's.
func (s *side) close() {
	for _, qp := range s.qps {
		qp.Destroy()
	}
	for _, ah := range s.ahs {
		ah.Destroy()
	}
	if s.mr != nil {
		s.mr.Dereg()
	}
}

// src and dst are QP i's source and target halves.
func (s *side) src(i int) int { return 2 * i * s.half }
func (s *side) dst(i int) int { return (2*i + 1) * s.half }

// qpType maps -c to the QP type.
func qpType(c string) verbs.QPType {
	switch c {
	case UC:
		return verbs.QPTypeUC
	case UD:
		return verbs.QPTypeUD
	}
	return verbs.QPTypeRC
}

// connect moves every QP to RTS towards the peer's records (ctx_connect):
// RC with its READ/atomic depths, RNR timer and retry counts; UC with the
// path only; UD with an address handle per QP, as its datagrams carry the
// destination in each WR.
func (s *side) connect() error {
	for i, qp := range s.qps {
		r := s.rem[i]
		if [8]byte(r.GID[8:]) == [8]byte{} {
			return fmt.Errorf("the peer's GID %v has no address: RoCE needs its GID", r.GID)
		}
		av := verbs.AHAttr{IsGlobal: true, DGID: r.GID, SGIDIndex: uint8(s.gidIdx), HopLimit: hopLimit,
			SL: uint8(s.p.SL), PortNum: uint8(s.p.IBPort)}
		var rtr, rts verbs.QPAttr
		var rtrMask, rtsMask verbs.AttrMask
		switch s.p.Conn {
		case UD:
			ah, err := s.pd.CreateAH(av)
			if err != nil {
				return fmt.Errorf("create AH: %w", err)
			}
			s.ahs = append(s.ahs, ah)
			rtr, rtrMask = verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState
			rts, rtsMask = verbs.QPAttr{State: verbs.QPSRTS, SQPSN: s.my[i].PSN}, verbs.AttrState|verbs.AttrSQPSN
		case UC:
			rtr = verbs.QPAttr{State: verbs.QPSRTR, PathMTU: s.mtu, DestQPN: r.QPN, RQPSN: r.PSN, AH: av}
			rtrMask = verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
			rts, rtsMask = verbs.QPAttr{State: verbs.QPSRTS, SQPSN: s.my[i].PSN}, verbs.AttrState|verbs.AttrSQPSN
		default:
			rtr = verbs.QPAttr{State: verbs.QPSRTR, PathMTU: s.mtu, DestQPN: r.QPN, RQPSN: r.PSN,
				MaxDestRdAtomic: uint8(s.my[i].OutReads), MinRNRTimer: minRNRTimer, AH: av}
			rtrMask = verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN |
				verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
			rts = verbs.QPAttr{State: verbs.QPSRTS, Timeout: uint8(s.p.QPTimeout), RetryCnt: 7, RNRRetry: 7,
				SQPSN: s.my[i].PSN, MaxRdAtomic: uint8(max(r.OutReads, 1))}
			rtsMask = verbs.AttrState | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry |
				verbs.AttrSQPSN | verbs.AttrMaxQPRdAtomic
		}
		if err := qp.Modify(&rtr, rtrMask); err != nil {
			return fmt.Errorf("QP to RTR: %w", err)
		}
		if err := qp.Modify(&rts, rtsMask); err != nil {
			return fmt.Errorf("QP to RTS: %w", err)
		}
	}
	return nil
}

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

// sendWR builds the WR a bandwidth or latency test posts on QP i.
func (s *side) sendWR(i, size int) verbs.SendWR {
	p := s.p
	wr := verbs.SendWR{WRID: uint64(i), SGL: []verbs.SGE{s.mr.SGE(s.src(i), size)},
		RemoteAddr: s.rem[i].VAddr, RKey: s.rem[i].RKey}
	switch p.Verb {
	case Send:
		wr.Opcode = verbs.WRSend
	case Write:
		wr.Opcode = verbs.WRRDMAWrite
	case Read:
		wr.Opcode = verbs.WRRDMARead
	case Atomic:
		wr.SGL[0] = s.mr.SGE(s.src(i), 8)
		if p.AtomicOp == CmpAndSwap {
			wr.Opcode = verbs.WRAtomicCmpAndSwp
		} else {
			wr.Opcode, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, 1
		}
	}
	if p.Conn == UD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ahs[i], s.rem[i].QPN, udQKey
	}
	if size <= p.Inline && (p.Verb == Send || p.Verb == Write) {
		wr.Flags |= verbs.SendInline
	}
	return wr
}

// postRecvs posts n receives on QP i, each into the whole target half,
// so that they fit every size of a -a sweep.
func (s *side) postRecvs(i, n int) error {
	if n <= 0 {
		return nil
	}
	wrs := s.rwr[:0]
	for range n {
		wrs = append(wrs, verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{s.mr.SGE(s.dst(i), s.half)}})
	}
	s.rwr = wrs[:0]
	k, err := s.qps[i].PostRecv(wrs)
	s.rq[i] += k
	return err
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
