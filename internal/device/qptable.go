package device

import "sync/atomic"

// qpTable maps a QPN to its QP for the readers, which look up every packet
// without a lock: a two-level radix table over the 24-bit QPN space, 4,096
// pages of 4,096 entries, each page made when its first QP is stored. A
// lookup is two loads, with nothing to hash on the per-packet path. QPNs
// are handed out one after another, so 100,000 QPs fill 25 pages, 800 KiB,
// 8 bytes a QP; the top level is 32 KiB an engine. Stores and deletes are
// serialized by the caller (the engine's qps lock); loads may run beside
// them.
type qpTable struct {
	pages [qpPages]atomic.Pointer[qpPage]
}

const (
	qpPageBits = 12
	qpPages    = 1 << (24 - qpPageBits)
)

type qpPage [1 << qpPageBits]atomic.Pointer[QP]

// load returns the QP numbered qpn, or nil.
func (t *qpTable) load(qpn uint32) *QP {
	if qpn >= 1<<24 {
		return nil
	}
	p := t.pages[qpn>>qpPageBits].Load()
	if p == nil {
		return nil
	}
	return p[qpn&(1<<qpPageBits-1)].Load()
}

// store files qp under its QPN, which must be below 2^24.
func (t *qpTable) store(qp *QP) {
	slot := &t.pages[qp.qpn>>qpPageBits]
	p := slot.Load()
	if p == nil {
		p = new(qpPage)
		slot.Store(p)
	}
	p[qp.qpn&(1<<qpPageBits-1)].Store(qp)
}

// delete removes the QP numbered qpn. Its page stays: QPNs are handed
// out again once the counter wraps.
func (t *qpTable) delete(qpn uint32) {
	if p := t.pages[qpn>>qpPageBits].Load(); p != nil {
		p[qpn&(1<<qpPageBits-1)].Store(nil)
	}
}
