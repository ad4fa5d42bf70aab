package transport

import (
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/memory"
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

// deliver parses the packets e emitted and hands them to qp.
func (e *benchEnv) deliver(b *testing.B, qp *QP, pkt *wire.Packet, now time.Time) {
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
	now := time.Unix(1000, 0)
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
