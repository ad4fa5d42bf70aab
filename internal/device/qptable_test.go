package device

import (
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// TestQPTable files QPs across page boundaries and at both ends of the
// 24-bit QPN space, looks them up, deletes them, and looks up numbers
// nobody holds, including some beyond the space.
func TestQPTable(t *testing.T) {
	var tab qpTable
	qpns := []uint32{0x11, 0xfff, 0x1000, 0x1001, 0x12345, 0xfff000, 0xffffff}
	for _, n := range qpns {
		tab.store(&QP{qpn: n})
	}
	for _, n := range qpns {
		if qp := tab.load(n); qp == nil || qp.qpn != n {
			t.Errorf("load(%#x) = %v, want the QP numbered so", n, qp)
		}
	}
	for _, n := range []uint32{0, 0x10, 0x12, 0x2000, 0xfffffe, 1 << 24, 1<<24 + 0x11, ^uint32(0)} {
		if qp := tab.load(n); qp != nil {
			t.Errorf("load(%#x) = QP %#x, want none", n, qp.qpn)
		}
	}
	tab.delete(0x1000)
	tab.delete(0x777777) // never stored: its page does not exist
	if tab.load(0x1000) != nil || tab.load(0x1001) == nil {
		t.Error("delete(0x1000) did not remove it alone")
	}
	tab.store(&QP{qpn: 0x1000}) // the QPN handed out again
	if qp := tab.load(0x1000); qp == nil {
		t.Error("a QPN stored again after its delete is not found")
	}
}

// TestQPTableConcurrent: lookups beside stores and deletes, as the
// readers' lookups run beside NewQP and Destroy (go test -race).
func TestQPTableConcurrent(t *testing.T) {
	var tab qpTable
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			for n := uint32(0x11); n < 0x11+3*4096; n += 97 {
				if qp := tab.load(n); qp != nil && qp.qpn != n {
					t.Errorf("load(%#x) found QP %#x", n, qp.qpn)
					return
				}
			}
		}
	}()
	for n := uint32(0x11); n < 0x11+3*4096; n++ {
		tab.store(&QP{qpn: n})
		if n%3 == 0 {
			tab.delete(n)
		}
	}
	close(done)
	wg.Wait()
}

// BenchmarkQPTable times the router's lookup of a packet's QP.
func BenchmarkQPTable(b *testing.B) {
	var tab qpTable
	for n := uint32(0x11); n < 0x11+1024; n++ {
		tab.store(&QP{qpn: n})
	}
	var sum uint32
	n := uint32(0x11)
	for b.Loop() {
		sum += tab.load(n).qpn
		n = 0x11 + (n+1)&1023
	}
	_ = sum
}

// TestPacketForDestroyedQP: a packet the router filed for a QP that is
// destroyed before its worker takes the batch is dropped and counted as
// malformed (no such QP), never handed to the destroyed QP's transport.
func TestPacketForDestroyedQP(t *testing.T) {
	_, y := pairOf(t, "mem", 4096)
	qp := y.qp
	qp.Destroy()
	if y.e.tab.load(qp.qpn) != nil {
		t.Fatalf("QP %#x still in the engine's table after Destroy", qp.qpn)
	}
	pkt := make([]byte, wire.BTHLen+wire.ICRCLen)
	bth := wire.BTHFields{Opcode: wire.Opcode(wire.OpSendOnly), DestQP: qp.qpn, PSN: 0}
	bth.Encode(pkt)
	bt := batchPool.Get().(*rxBatch)
	bt.bufs[0], bt.qp[0], bt.n = pkt, qp, 1
	bt.lent[0] = true // not a pool buffer: the worker leaves it alone
	before := y.e.stats.Get(stats.Malformed)
	w := qp.w
	w.mu.Lock()
	w.handle(event{kind: evPackets, batch: bt})
	w.mu.Unlock()
	if got := y.e.stats.Get(stats.Malformed); got != before+1 {
		t.Errorf("malformed %d after the packet, want %d", got, before+1)
	}
	if bt.qp[0] != nil || bt.bufs[0] != nil || bt.n != 0 {
		t.Error("the handled batch still holds the packet or its QP")
	}
}
