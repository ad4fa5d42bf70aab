package transport

import (
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/wire"
)

// benchEnv is an Env for benchmarks: it reuses its buffers and keeps the
// emitted packets, put together, until the benchmark delivers them.
type benchEnv struct {
	out    []link.Packet
	free   [][]byte
	gather bool
}

func (e *benchEnv) Buffer() []byte {
	if n := len(e.free); n > 0 {
		b := e.free[n-1]
		e.free = e.free[:n-1]
		return b[:0]
	}
	return make([]byte, 0, link.MaxPacket)
}
func (e *benchEnv) Emit(p link.Packet) {
	if p.Payload != nil {
		// Put a gathered packet together, as the link does.
		n := copy(p.Buf[p.Split+len(p.Payload):cap(p.Buf)], p.Buf[p.Split:])
		copy(p.Buf[p.Split:cap(p.Buf)], p.Payload)
		p.Buf = p.Buf[:p.Split+len(p.Payload)+n]
		p.Payload, p.Split = nil, 0
	}
	e.out = append(e.out, p)
}
func (e *benchEnv) Fatal(*QP, WCStatus) { panic("fatal") }
func (e *benchEnv) Gathers() bool       { return e.gather }
func (e *benchEnv) Push()               {}

// stopped is a Clock that always says its time: the benchmarks' time
// stands still.
type stopped int64

func (t stopped) Now() monotime.Time { return monotime.Time(t) }

// deliver parses the packets e emitted and hands them to qp.
func (e *benchEnv) deliver(b *testing.B, qp *QP, pkt *wire.Packet, now Clock) {
	for i := range e.out {
		if err := pkt.Parse(e.out[i].Buf); err != nil {
			b.Fatal(err)
		}
		qp.Receive(pkt, now)
		e.free = append(e.free, e.out[i].Buf)
		e.out[i] = link.Packet{}
	}
	e.out = e.out[:0]
}

type countCQ struct{ n, errs int }

func (c *countCQ) Push(wc WC, _ bool) {
	c.n++
	if wc.Status != WCSuccess {
		c.errs++
	}
}

// BenchmarkWrite measures the transport's own work per RDMA WRITE message
// on both ends, with no device, link or ICRC: posting, building the
// request packets, the responder's checks and placement, the ACK and its
// completion. WRs are posted as perftest's bandwidth tests post them: up
// to 128 outstanding, every 100th signaled.
func BenchmarkWrite(b *testing.B) {
	for _, size := range []int{64, 4096, 65536} {
		b.Run(fmt.Sprint(size), func(b *testing.B) { benchWrite(b, size) })
	}
}

func benchWrite(b *testing.B, size int) {
	const depth, every = 128, 100
	// Two sides' memory, with QPs of perftest's send queue depth on
	// environments that reuse their buffers.
	sa, sb := newSide(b, 0x11, 1<<20), newSide(b, 0x12, 1<<20)
	ea, eb := &benchEnv{gather: true}, &benchEnv{gather: true}
	ca := &countCQ{}
	a := NewQP(Config{QPN: 0x11, PD: testPD, Mem: sa.mem, SendCQ: ca, RecvCQ: ca,
		SQ: NewSendQueue(depth), RQ: NewRecvQueue(16), MaxSGE: 1}, ea)
	bq := NewQP(Config{QPN: 0x12, PD: testPD, Mem: sb.mem, SendCQ: &countCQ{}, RecvCQ: &countCQ{},
		SQ: NewSendQueue(depth), RQ: NewRecvQueue(16), MaxSGE: 1}, eb)
	connect(a, bq, 4096, nil)
	wrs := make([]SendWR, every)
	for i := range wrs {
		wrs[i] = SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SGL: []memory.SGE{sa.sge(0, size)},
			RemoteAddr: sb.mr.Addr(), RKey: sb.mr.RKey()}
	}
	wrs[every-1].Flags = SendSignaled
	var now Clock = stopped(1000 * time.Second)
	var pkt wire.Packet
	// batches holds the sizes of the posted batches, each ending with a
	// signaled WR: a completion retires the oldest.
	var batches []int
	run := func(msgs int) {
		posted, done := 0, 0
		for retired := ca.n; done < msgs; {
			if n := min(every, msgs-posted, depth-(posted-done)); n > 0 {
				if _, err := a.PostSend(wrs[every-n:], qpstate.RTS); err != nil {
					b.Fatal(err)
				}
				posted += n
				batches = append(batches, n)
			}
			a.Progress(now)
			ea.deliver(b, bq, &pkt, now)
			bq.Progress(now)
			eb.deliver(b, a, &pkt, now)
			for ; retired < ca.n; retired++ {
				done += batches[0]
				batches = batches[:copy(batches, batches[1:])]
			}
			if ca.errs > 0 {
				b.Fatal("error completion")
			}
		}
	}
	run(4 * depth) // the environments' buffers, the queues' slots
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
}

// BenchmarkWriteQPs measures the transport's own work per 64 KiB RDMA
// WRITE when QPs share a send budget of 1024 PSNs, as a device's do
// (verbs' sendBudget), every WR signaled, as perftest signals them above
// 8 KiB, each QP with up to 128 outstanding. With hundreds of QPs, each
// QP's state, queue slots and buffers have left the cache by its next
// turn; the budget's grants decide how many messages a turn sends
// (minGrant, docs/design/tuning.md#min-grant).
func BenchmarkWriteQPs(b *testing.B) {
	for _, q := range []int{1, 16, 256, 1024} {
		b.Run(fmt.Sprint(q), func(b *testing.B) { benchWriteQPs(b, q, 65536) })
	}
}

func benchWriteQPs(b *testing.B, nqp, size int) {
	const depth = 128
	type qpPair struct {
		a, b          *QP
		cq            *countCQ
		wr            SendWR
		posted, acked int
	}
	// dirty holds the A-side QPs to run: woken by the budget, posted to
	// or acknowledged; running takes them into spare, and the two swap.
	dirty, spare := make([]*QP, 0, 2*nqp), make([]*QP, 0, 2*nqp)
	budget := NewBudget(1024, func(qp *QP) { dirty = append(dirty, qp) })
	ea, eb := &benchEnv{gather: true}, &benchEnv{gather: true}
	for _, e := range []*benchEnv{ea, eb} { // a pass of the loop emits at most the budget's packets
		for range 1024 {
			e.free = append(e.free, make([]byte, 0, link.MaxPacket))
		}
	}
	pairs := make([]*qpPair, nqp)
	byQPN := map[uint32]*QP{}
	for i := range pairs {
		qa, qb := uint32(0x100+2*i), uint32(0x101+2*i)
		sa, sb := newSide(b, qa, size), newSide(b, qb, size)
		cq := &countCQ{}
		a := NewQP(Config{QPN: qa, PD: testPD, Mem: sa.mem, SendCQ: cq, RecvCQ: cq,
			SQ: NewSendQueue(depth), RQ: NewRecvQueue(16), MaxSGE: 1, Window: 512, Budget: budget}, ea)
		bq := NewQP(Config{QPN: qb, PD: testPD, Mem: sb.mem, SendCQ: &countCQ{}, RecvCQ: &countCQ{},
			SQ: NewSendQueue(depth), RQ: NewRecvQueue(16), MaxSGE: 1}, eb)
		connect(a, bq, 4096, func(pa, pb *Path) { pa.DestQPN, pb.DestQPN = qb, qa })
		p := &qpPair{a: a, b: bq, cq: cq, wr: SendWR{Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGL: []memory.SGE{sa.sge(0, size)}, RemoteAddr: sb.mr.Addr(), RKey: sb.mr.RKey()}}
		pairs[i], byQPN[qa], byQPN[qb] = p, a, bq
	}
	var now Clock = stopped(1000 * time.Second)
	var pkt wire.Packet
	// deliver hands what e emitted to the QPs it is addressed to and
	// returns them, each once.
	got := make([]*QP, 0, 2*nqp)
	deliver := func(e *benchEnv) []*QP {
		got = got[:0]
		for i := range e.out {
			if err := pkt.Parse(e.out[i].Buf); err != nil {
				b.Fatal(err)
			}
			qp := byQPN[pkt.BTH.DestQP()]
			qp.Receive(&pkt, now)
			if len(got) == 0 || got[len(got)-1] != qp {
				got = append(got, qp)
			}
			e.free = append(e.free, e.out[i].Buf)
			e.out[i] = link.Packet{}
		}
		e.out = e.out[:0]
		return got
	}
	run := func(msgs int) {
		posted, acked := 0, 0
		for _, p := range pairs { // counts from here
			p.posted, p.acked = 0, p.cq.n
		}
		for acked < msgs {
			for _, p := range pairs { // post as perftest does: keep depth outstanding
				for p.posted-(p.cq.n-p.acked) < depth && posted < msgs {
					if _, err := p.a.PostSend([]SendWR{p.wr}, qpstate.RTS); err != nil {
						b.Fatal(err)
					}
					p.posted++
					posted++
					if len(dirty) == 0 || dirty[len(dirty)-1] != p.a {
						dirty = append(dirty, p.a)
					}
				}
			}
			for len(dirty) > 0 {
				batch := dirty
				dirty, spare = spare[:0], batch
				for _, qp := range batch {
					qp.Progress(now)
				}
				for _, qp := range deliver(ea) {
					qp.Progress(now)
				}
				dirty = append(dirty, deliver(eb)...)
			}
			acked = 0
			for _, p := range pairs {
				if p.cq.errs > 0 {
					b.Fatal("error completion")
				}
				acked += p.cq.n - p.acked
			}
		}
	}
	run(depth * nqp) // every send queue slot once: the first use of a slot sizes its SGL
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
}
