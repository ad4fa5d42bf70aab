package memory

import "fmt"

// SGE is a scatter/gather element, as ibv_sge: Length bytes at Addr in the
// region with local key LKey. A work request's data is the concatenation
// of its SGEs in order.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// TotalLength returns the sum of the SGEs' lengths.
func TotalLength(sgl []SGE) uint64 {
	var n uint64
	for i := range sgl {
		n += uint64(sgl[i].Length)
	}
	return n
}

// maxPieces is how many SGEs one Gather or Scatter resolves on the stack
// before copying. Longer ranges are copied maxPieces SGEs at a time.
const maxPieces = 16

// Gather copies len(dst) bytes of the concatenation of sgl, starting at
// byte off, into dst: the sender's side of SEND, RDMA WRITE and of read
// responses. Every SGE the range touches must have a valid lkey of pd
// (ErrKey, ErrPD) and lie inside its region as a whole (ErrBounds); local
// reads need no right. SGEs of length 0 are skipped. The range must end
// within the list (ErrLength). Gather returns len(dst) and nil, or 0 and an
// error with dst untouched.
func (t *Table) Gather(pd uint32, sgl []SGE, off uint64, dst []byte) (int, error) {
	return t.copySGL(pd, sgl, off, dst, false)
}

// Scatter copies src into the concatenation of sgl at byte off: the
// receiver's side of SEND and of RDMA READ responses. The rules are
// Gather's, and every SGE touched also needs AccessLocalWrite (ErrAccess).
// All touched SGEs are checked before the first byte is written, so an
// error leaves every region as it was. Scatter returns len(src) and nil,
// or 0 and an error.
//
// Only the SGEs the range touches are checked, as rxe does: a message
// shorter than a receive WQE succeeds even if the WQE's unused SGEs are
// invalid.
func (t *Table) Scatter(pd uint32, sgl []SGE, off uint64, src []byte) (int, error) {
	return t.copySGL(pd, sgl, off, src, true)
}

// Slice returns bytes [off, off+n) of sgl's concatenation as a slice of
// the registered memory, checked as Gather checks it, when they lie in one
// SGE; nil (and no error) when they span more. A packet's payload can
// then be sent from where it lies instead of a copy.
func (t *Table) Slice(pd uint32, sgl []SGE, off uint64, n int) ([]byte, error) {
	var buf [1][]byte
	pieces, more, err := t.collect(pd, sgl, off, uint64(n), false, buf[:0])
	if err != nil || more || len(pieces) != 1 {
		return nil, err
	}
	return pieces[0], nil
}

// copySGL copies between b and bytes [off, off+len(b)) of sgl's
// concatenation, checking all pieces first. When the range spans more
// than maxPieces SGEs it copies in rounds; a round after the first fails
// only if a region is deregistered meanwhile, and then the bytes already
// copied are reported.
func (t *Table) copySGL(pd uint32, sgl []SGE, off uint64, b []byte, scatter bool) (int, error) {
	var buf [maxPieces][]byte
	done := 0
	for {
		pieces, more, err := t.collect(pd, sgl, off+uint64(done), uint64(len(b)-done), scatter, buf[:0])
		if err != nil {
			return done, err
		}
		for _, p := range pieces {
			if scatter {
				done += copy(p, b[done:])
			} else {
				done += copy(b[done:], p)
			}
		}
		if !more {
			return done, nil
		}
	}
}

// collect checks every SGE holding bytes [off, off+n) of sgl's
// concatenation and appends those bytes, one piece per SGE, to pieces
// until it is full; more reports pieces left out.
func (t *Table) collect(pd uint32, sgl []SGE, off, n uint64, write bool, pieces [][]byte) (_ [][]byte, more bool, _ error) {
	start, want := off, n
	if n == 0 {
		if off > TotalLength(sgl) {
			return nil, false, fmt.Errorf("%w: offset %#x, list holds %#x", ErrLength, off, TotalLength(sgl))
		}
		return pieces, false, nil
	}
	for i := range sgl {
		e := &sgl[i]
		l := uint64(e.Length)
		if off >= l {
			off -= l // also skips SGEs of length 0
			continue
		}
		g, err := t.lookup(pd, e.LKey, "lkey")
		if err != nil {
			return nil, false, fmt.Errorf("%w (SGE %d)", err, i)
		}
		b, err := g.checkLocal(e.Addr, l, write)
		if err != nil {
			return nil, false, fmt.Errorf("%w (SGE %d)", err, i)
		}
		if !write {
			// Order this read after the RDMA WRITEs noted so far
			// (NoteRemoteWrite counts a message after its last byte):
			// a goroutine that learnt of a WRITE from the network, a
			// poster sending its bytes inline or another QP's worker
			// gathering them, reads what the responder's goroutine
			// wrote (TestInlineAfterRemoteWrite).
			g.remoteWrites.Load()
		}
		k := min(l-off, n)
		if len(pieces) < cap(pieces) {
			pieces = append(pieces, b[off:off+k])
		} else {
			more = true
		}
		off, n = 0, n-k
		if n == 0 {
			return pieces, more, nil
		}
	}
	return nil, false, fmt.Errorf("%w: %#x bytes at offset %#x, list holds %#x", ErrLength, want, start, TotalLength(sgl))
}
