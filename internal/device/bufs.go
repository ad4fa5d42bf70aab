package device

import (
	"sync"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/transport"
)

// pktBuf is a packet buffer. Buffers circulate through bufPool between the
// readers, the workers and the link, so packets allocate nothing.
type pktBuf [link.MaxPacket]byte

var bufPool = sync.Pool{New: func() any { return new(pktBuf) }}

func getBuf() []byte  { return bufPool.Get().(*pktBuf)[:0] }
func putBuf(b []byte) { bufPool.Put((*pktBuf)(b[:link.MaxPacket])) }
func fullBuf() []byte { return bufPool.Get().(*pktBuf)[:] }

// rxBatch carries received packets from a reader to one worker.
type rxBatch struct {
	bufs   [link.MaxBatch][]byte
	lent   [link.MaxBatch]bool // bufs[i] is the link's memory (link.CapLend), not a pool buffer
	qp     [link.MaxBatch]*QP  // the QP each packet is for (multicast: one copy per QP)
	origin [link.MaxBatch]transport.Origin
	seed   [link.MaxBatch]uint32 // with pend: the ICRC's seed (link.Packet.ICRCSeed)
	pend   [link.MaxBatch]bool   // bufs[i]'s ICRC is still to be checked (link.CapDeferICRC)
	n      int
}

var batchPool = sync.Pool{New: func() any { return new(rxBatch) }}
