package device

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/memlink"
	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/psn"
	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/transport"
)

// The engine's tests drive engines directly: two engines joined by a link,
// an RC QP on each connected to the other, a registered buffer and a CQ,
// as package verbs would set them up.

// end is one side of a connected RC pair.
type end struct {
	e   *Engine
	mem *memory.Table
	mr  *memory.Region
	buf []byte
	cq  *testCQ
	qp  *QP
}

// testCQ collects completions.
type testCQ struct {
	mu  sync.Mutex
	wcs []transport.WC
}

func (c *testCQ) Push(wc transport.WC, _ bool) {
	c.mu.Lock()
	c.wcs = append(c.wcs, wc)
	c.mu.Unlock()
}

// wait waits for n completions and returns them.
func (c *testCQ) wait(t testing.TB, n int) []transport.WC {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Microsecond) {
		c.mu.Lock()
		if len(c.wcs) >= n {
			out := c.wcs[:n:n]
			c.wcs = append([]transport.WC(nil), c.wcs[n:]...)
			c.mu.Unlock()
			return out
		}
		got := len(c.wcs)
		c.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d completions", got, n)
		}
	}
}

// udpHost hands out loopback addresses to this package's tests
// (127.0.3.x); other packages' tests use other ranges.
var udpHost atomic.Uint32

// engineKinds are the links the tests join two engines with.
var engineKinds = []string{"mem", "udp"}

// newEngines opens two engines joined by an in-memory link ("mem") or UDP
// sockets on two loopback addresses ("udp").
func newEngines(t testing.TB, kind string) (*Engine, *Engine) {
	t.Helper()
	var ca, cb Config
	switch kind {
	case "mem":
		a, b := netip.MustParseAddrPort("198.18.0.1:4791"), netip.MustParseAddrPort("198.18.0.2:4791")
		la, lb := memlink.NewPair(a, b)
		ca, cb = Config{Addr: a, Link: la}, Config{Addr: b, Link: lb}
	case "udp":
		n := udpHost.Add(2)
		ca = Config{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 3, byte(n - 1)}), 4791)}
		cb = Config{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 3, byte(n)}), 4791)}
	default:
		t.Fatalf("no link %q", kind)
	}
	ea, err := Open(ca)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := Open(cb)
	if err != nil {
		ea.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { ea.Close(); eb.Close() })
	return ea, eb
}

const allAccess = memory.AccessLocalWrite | memory.AccessRemoteWrite | memory.AccessRemoteRead | memory.AccessRemoteAtomic

// newEnd creates an RC QP on e with a registered buffer of size bytes.
func newEnd(t testing.TB, e *Engine, size int) *end {
	t.Helper()
	x := &end{e: e, mem: memory.NewTable(16), buf: make([]byte, size), cq: &testCQ{}}
	var err error
	if x.mr, err = x.mem.Register(1, x.buf, allAccess); err != nil {
		t.Fatal(err)
	}
	x.qp, err = e.NewQP(transport.Config{Type: qpstate.RC, PD: 1, Mem: x.mem, SendCQ: x.cq, RecvCQ: x.cq,
		SQ: transport.NewSendQueue(256), RQ: transport.NewRecvQueue(256), MaxSGE: 4, MaxInline: 256}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// connect moves both QPs to RTS, each pointing at the other.
func connect(a, b *end) {
	for _, s := range []struct {
		x, peer *end
		sq, rq  uint32
	}{{a, b, 0x5a14bc, 0xfffff0}, {b, a, 0xfffff0, 0x5a14bc}} {
		p := transport.Path{DestQPN: s.peer.qp.QPN(), Peer: s.peer.e.cfg.Addr,
			SrcPort: link.FlowSourcePort(0, s.x.qp.QPN(), s.peer.qp.QPN()), MTU: 1024,
			SQPSN: psn.New(s.sq), RQPSN: psn.New(s.rq), MaxRdAtomic: 16, MaxDestRdAtomic: 16,
			Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1, Access: allAccess, PKey: 0xffff}
		s.x.qp.Modify(p, qpstate.Init)
		s.x.qp.Modify(p, qpstate.RTR)
		s.x.qp.Modify(p, qpstate.RTS)
	}
}

// pairOf opens two engines of a kind and a connected RC pair on them.
func pairOf(t testing.TB, kind string, size int) (*end, *end) {
	ea, eb := newEngines(t, kind)
	a, b := newEnd(t, ea, size), newEnd(t, eb, size)
	connect(a, b)
	return a, b
}

// write posts a signaled 8-byte RDMA WRITE, WR i, from x to the start of
// to's buffer.
func (x *end) write(t testing.TB, i int, to *end) {
	t.Helper()
	_, err := x.qp.PostSend([]transport.SendWR{{WRID: uint64(i), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []memory.SGE{{Addr: x.mr.Addr(), Length: 8, LKey: x.mr.LKey()}}, RemoteAddr: to.mr.Addr(), RKey: to.mr.RKey()}}, qpstate.RTS)
	if err != nil {
		t.Fatal(err)
	}
}

// noRetries fails the test if x's engine retransmitted anything.
func noRetries(t testing.TB, x *end) {
	t.Helper()
	x.e.UpdateLinkCounters()
	if n := x.e.stats.Snapshot().Map()["completer_retry_err"]; n != 0 {
		t.Errorf("%v retransmitted %d times on a lossless link", x.e.cfg.Addr, n)
	}
}
