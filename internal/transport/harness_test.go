package transport

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/wire"
)

// The harness runs two QPs with no device: a fake environment collects
// what each emits, the test decides what to deliver (or drop, or
// duplicate), and time is a variable the test advances.

type fakeEnv struct {
	out     []link.Packet
	fatal   []WCStatus
	gather  bool  // Gathers: emitted packets may carry link.Packet.Payload
	emitted int   // packets emitted so far
	pushed  []int // emitted at each Push
	onEmit  func(link.Packet)
}

func (e *fakeEnv) Buffer() []byte { return make([]byte, 0, link.MaxPacket) }
func (e *fakeEnv) Emit(p link.Packet) {
	if e.onEmit != nil {
		e.onEmit(p)
	}
	e.out = append(e.out, p)
	e.emitted++
}
func (e *fakeEnv) Fatal(_ *QP, s WCStatus)  { e.fatal = append(e.fatal, s) }
func (e *fakeEnv) Gathers() bool            { return e.gather }
func (e *fakeEnv) Push()                    { e.pushed = append(e.pushed, e.emitted) }
func (e *fakeEnv) take() (ps []link.Packet) { ps, e.out = e.out, nil; return ps }

type fakeCQ struct {
	wcs    []WC
	onPush func(WC)
}

func (c *fakeCQ) Push(wc WC, _ bool) {
	if c.onPush != nil {
		c.onPush(wc)
	}
	c.wcs = append(c.wcs, wc)
}

type side struct {
	qp  *QP
	env *fakeEnv
	cq  *fakeCQ
	mem *memory.Table
	mr  *memory.Region
	buf []byte
}

const testPD = 1

func newSide(t testing.TB, qpn uint32, size int) *side {
	t.Helper()
	s := &side{env: &fakeEnv{}, cq: &fakeCQ{}, mem: memory.NewTable(16), buf: make([]byte, size)}
	var err error
	s.mr, err = s.mem.Register(testPD, s.buf, memory.AccessLocalWrite|memory.AccessRemoteWrite|memory.AccessRemoteRead|memory.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	s.qp = NewQP(Config{QPN: qpn, PD: testPD, Mem: s.mem, SendCQ: s.cq, RecvCQ: s.cq,
		SQ: NewSendQueue(64), RQ: NewRecvQueue(64), MaxSGE: 4, MaxInline: 64}, s.env)
	return s
}

func (s *side) sge(off, n int) memory.SGE {
	return memory.SGE{Addr: s.mr.Addr() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}
}

// Now implements Clock: the harness's fake time, counting the reads.
func (h *harness) Now() monotime.Time {
	h.nows++
	return h.now
}

type harness struct {
	t    *testing.T
	a, b *side
	now  monotime.Time
	nows int // Now calls
	// drop decides whether a packet from a (toB) or b is lost.
	drop func(toB bool, p *wire.Packet) bool
	// With icrc set, move gives every packet a real ICRC, lets icrc
	// damage it (after the ICRC) and delivers it with the ICRC check
	// deferred (wire.Packet.DeferICRC), as a device does for packets
	// from a same-host peer.
	icrc     func(toB bool, b []byte)
	gathered int           // packets emitted with a gathered payload
	sent     []wire.Packet // every packet a sent, parsed (for inspection)
	back     []wire.Packet // every packet b sent
}

func newHarness(t *testing.T, mtu int, edit func(pa, pb *Path)) *harness {
	a, b := newSide(t, 0x11, 1<<20), newSide(t, 0x12, 1<<20)
	connect(a.qp, b.qp, mtu, edit)
	return &harness{t: t, a: a, b: b, now: monotime.Time(1000 * time.Second), drop: func(bool, *wire.Packet) bool { return false }}
}

// connect moves QP a (QPN 0x11) and QP b (0x12) to RTS, each the other's
// destination, with paths edit may change first.
func connect(a, b *QP, mtu int, edit func(pa, pb *Path)) {
	pa := Path{DestQPN: 0x12, Peer: netip.MustParseAddrPort("198.18.0.2:4791"), MTU: mtu,
		SQPSN: psn.New(0xfffff0), RQPSN: psn.New(100), MaxRdAtomic: 4, MaxDestRdAtomic: 4,
		Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 14, PKey: 0xffff,
		Access: memory.AccessRemoteWrite | memory.AccessRemoteRead | memory.AccessRemoteAtomic}
	pb := pa
	pb.DestQPN, pb.SQPSN, pb.RQPSN = 0x11, pa.RQPSN, pa.SQPSN
	if edit != nil {
		edit(&pa, &pb)
	}
	for _, x := range []struct {
		qp *QP
		p  Path
	}{{a, pa}, {b, pb}} {
		x.qp.SetPath(x.p)
		x.qp.SetState(qpstate.Init)
		x.qp.SetState(qpstate.RTR)
		x.qp.SetState(qpstate.RTS)
	}
}

// loseFirst makes the first packet with operation op (wire.Opcode.Op)
// going to b (toB) or to a get lost, and returns whether it has been.
func (h *harness) loseFirst(toB bool, op uint8) *bool {
	lost := new(bool)
	h.drop = func(to bool, p *wire.Packet) bool {
		if to == toB && !*lost && p.BTH.Opcode().Op() == op {
			*lost = true
			return true
		}
		return false
	}
	return lost
}

// deliver moves packets both ways until neither side emits anything.
func (h *harness) deliver() {
	for range 10000 {
		h.a.qp.Progress(h)
		h.b.qp.Progress(h)
		pa, pb := h.a.env.take(), h.b.env.take()
		if len(pa) == 0 && len(pb) == 0 {
			return
		}
		h.move(pa, h.b, true)
		h.move(pb, h.a, false)
	}
	h.t.Fatal("packets still flowing after 10000 rounds")
}

func (h *harness) move(ps []link.Packet, to *side, toB bool) {
	for _, p := range ps {
		if p.Payload != nil {
			// A gathered payload (Env.Gathers): the packet as the link
			// puts it together.
			b := append(append(append([]byte(nil), p.Buf[:p.Split]...), p.Payload...), p.Buf[p.Split:]...)
			p = link.Packet{Buf: b, Peer: p.Peer, SrcPort: p.SrcPort}
			h.gathered++
		}
		var seed uint32
		if h.icrc != nil {
			f := wire.IPFields{Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.2"),
				SrcPort: 0xc000, DstPort: wire.UDPPort, FlagsFrag: wire.DF}
			if !toB {
				f.Src, f.Dst = f.Dst, f.Src
			}
			body := p.Buf[:len(p.Buf)-wire.ICRCLen]
			wire.PutICRC(p.Buf, f.ICRC(body))
			h.icrc(toB, p.Buf)
			seed = f.HeaderCRC(body)
		}
		var pkt wire.Packet
		if err := pkt.Parse(p.Buf); err != nil {
			h.t.Fatalf("emitted packet does not parse: %v", err)
		}
		if h.icrc != nil {
			pkt.DeferICRC(seed)
		}
		if toB {
			h.sent = append(h.sent, pkt)
		} else {
			h.back = append(h.back, pkt)
		}
		if h.drop(toB, &pkt) {
			continue
		}
		to.qp.Receive(&pkt, h)
	}
}

// advance moves time to the next deadline of either QP and fires it.
func (h *harness) advance() time.Duration {
	h.t.Helper()
	d := h.a.qp.Deadline()
	if e := h.b.qp.Deadline(); e != 0 && (d == 0 || e < d) {
		d = e
	}
	if d == 0 {
		h.t.Fatal("no timer armed")
	}
	step := time.Duration(d - h.now)
	h.now = d
	h.a.qp.Timeout(h)
	h.b.qp.Timeout(h)
	return step
}

func (h *harness) post(s *side, wrs ...SendWR) {
	h.t.Helper()
	if n, err := s.qp.PostSend(wrs, qpstate.RTS); err != nil {
		h.t.Fatalf("PostSend: %d %v", n, err)
	}
}

func (h *harness) postRecv(s *side, wrs ...RecvWR) {
	h.t.Helper()
	if _, err := s.qp.cfg.RQ.Post(wrs); err != nil {
		h.t.Fatal(err)
	}
}
