package perftest

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"github.com/goroce/goroce/verbs"
)

const (
	cycleBuffer = 4096 // sysconf(_SC_PAGESIZE), perftest's cycle buffer
	cacheLine   = 64
	minRNRTimer = 12         // perftest's MIN_RNR_TIMER
	hopLimit    = 0xff       // perftest's GRH hop limit on RoCE
	udQKey      = 0x11111111 // perftest's DEF_QKEY
	grhLen      = 40         // UD receive buffers start with the GRH (perftest's UD_ADDITION)
	pollBatch   = 16         // CTX_POLL_BATCH
)

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
