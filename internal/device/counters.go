package device

import (
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/transport"
)

// countRx adds the packets received so far in a batch, and the one being
// handled (rxCur), to the device's counters. A batch adds them once, at
// its end, as the counters are shared by every goroutine; but a completion
// that a packet brings must not be seen before that packet is counted (a
// tool that prints its counters after its last completion would miss it),
// so the QPs' CQs call this before each completion (countedCQ). A packet
// whose ICRC is checked later, as the transport reads it (the same-host
// path), is known good by then: the transport completes nothing for a
// packet it dropped.
func (w *worker) countRx() {
	w.takeCur()
	if w.rxPkts > 0 {
		w.e.stats.Add(stats.RcvdPkts, w.rxPkts)
		w.e.stats.Add(stats.RcvdBytes, w.rxBytes)
		w.rxPkts, w.rxBytes = 0, 0
	}
}

// takeCur adds the packet being handled (rxCur), unless a completion it
// brought has counted it already, to those received in the batch.
func (w *worker) takeCur() {
	if w.rxCur >= 0 {
		w.rxPkts++
		w.rxBytes += uint64(w.rxCur)
		w.rxCur = -1
	}
}

// countedCQ is the transport's view of a QP's CQ: each completion first
// counts the packets received before it (worker.countRx).
type countedCQ struct {
	cq transport.CQ
	w  *worker
}

// Push implements transport.CQ.
func (c *countedCQ) Push(wc transport.WC, solicited bool) {
	c.w.countRx()
	c.cq.Push(wc, solicited)
}

// UpdateLinkCounters copies the counts the link keeps into the device's
// counters: those the counter table says the link counts (stats.FromLink),
// and icrc_errors with the deferred checks the engine found wrong.
func (e *Engine) UpdateLinkCounters() { e.updateLinkCounters() }

func (e *Engine) updateLinkCounters() {
	ls := e.link.Stats()
	for _, c := range stats.FromLink() {
		if c != stats.ICRCErrors {
			e.stats.Set(c, ls[c])
		}
	}
	e.stats.Set(stats.ICRCErrors, ls[stats.ICRCErrors]+e.deferredICRC.Load())
}
