package memory

import (
	"errors"
	"math"
	"math/bits"
	"testing"
	"unsafe"
)

// FuzzCheckRemote checks CheckRemote against a reference computed in 65-bit
// arithmetic: it never panics, succeeds exactly when the rights are granted
// and [va, va+length) lies inside the region, and on success returns length
// bytes of the region starting at va.
func FuzzCheckRemote(f *testing.F) {
	f.Add(uint16(64), uint8(0), false, uint64(0), uint64(64), uint32(AccessRemoteRead))
	f.Add(uint16(64), uint8(3), false, uint64(63), uint64(1), uint32(AccessRemoteWrite))
	f.Add(uint16(64), uint8(0), false, uint64(64), uint64(0), uint32(0))
	f.Add(uint16(64), uint8(0), false, uint64(1), uint64(math.MaxUint64), uint32(0))
	f.Add(uint16(64), uint8(0), false, uint64(math.MaxUint64), uint64(1), uint32(0))
	f.Add(uint16(0), uint8(0), true, uint64(0), uint64(0), uint32(AccessRemoteAtomic))
	f.Add(uint16(4096), uint8(7), true, uint64(4095), uint64(2), uint32(AccessRemoteRead))

	backing := make([]byte, 4096+8)
	tab := NewTable(0)
	const granted = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead
	f.Fuzz(func(t *testing.T, size uint16, start uint8, zeroBased bool, delta, length uint64, need uint32) {
		n := int(size) % 4097
		buf := backing[int(start)%8:][:n]
		a := granted
		if zeroBased {
			a |= AccessZeroBased
		}
		r, err := tab.Register(1, buf, a)
		if err != nil {
			t.Fatal(err)
		}
		defer tab.Deregister(r)
		base := r.Addr()
		va := base + delta // wraps: delta reaches every va
		b, err := r.CheckRemote(va, length, Access(need))

		end, carry := bits.Add64(va, length, 0)
		inside := va >= base && carry == 0 && end <= base+uint64(n)
		allowed := Access(need)&^a == 0
		switch {
		case !allowed:
			if !errors.Is(err, ErrAccess) {
				t.Fatalf("need %v of %v: error %v, want ErrAccess", Access(need), a, err)
			}
		case !inside:
			if !errors.Is(err, ErrBounds) {
				t.Fatalf("%#x bytes at %#x, region %d bytes at %#x: error %v, want ErrBounds", length, va, n, base, err)
			}
		default:
			if err != nil {
				t.Fatalf("%#x bytes at %#x, region %d bytes at %#x: %v", length, va, n, base, err)
			}
			if uint64(len(b)) != length || uint64(cap(b)) != length {
				t.Fatalf("got len %d cap %d, want %d", len(b), cap(b), length)
			}
			if length > 0 {
				lo := uintptr(unsafe.Pointer(&buf[0]))
				p := uintptr(unsafe.Pointer(&b[0]))
				if p != lo+uintptr(va-base) || p+uintptr(length) > lo+uintptr(n) {
					t.Fatalf("result at %#x+%d, region at %#x+%d, want offset %d", p, length, lo, n, va-base)
				}
			}
		}
		if err != nil && b != nil {
			t.Fatalf("error %v with %d bytes", err, len(b))
		}
	})
}

// FuzzScatter runs Scatter and Gather over a list of four SGEs built from
// the input, against a model: Scatter succeeds exactly when the range ends
// within the list and every non-empty SGE it touches is good; a failed
// Scatter writes nothing; a successful one changes at most len(src) bytes,
// and Gather of the same range then succeeds too.
func FuzzScatter(f *testing.F) {
	f.Add([]byte{0, 0, 16, 0, 1, 4, 8, 0, 2, 0, 8, 0, 0, 0, 4, 1}, uint16(2), uint16(20))
	f.Add([]byte{0, 0, 32, 0, 3, 0, 8, 0, 0, 8, 8, 0, 1, 0, 8, 0}, uint16(0), uint16(40))
	f.Add([]byte{0, 250, 16, 1, 0, 0, 0, 0, 0, 0, 8, 0, 2, 0, 255, 0}, uint16(0), uint16(8))

	tab := NewTable(0)
	bufs := [][]byte{alignedBuf(32), alignedBuf(32), alignedBuf(32)}
	regs := []*Region{
		mustRegister(f, tab, 1, bufs[0], AccessLocalWrite),
		mustRegister(f, tab, 1, bufs[1], AccessLocalWrite|AccessZeroBased),
		mustRegister(f, tab, 1, bufs[2], AccessRemoteRead), // read only
	}
	other := mustRegister(f, tab, 2, alignedBuf(32), AccessLocalWrite)
	f.Fuzz(func(t *testing.T, spec []byte, off16, n16 uint16) {
		// Each SGE is 4 bytes of spec: region (0-2; 3 another PD's; 4+ a bad
		// key), offset into the region (signed, so it can start before it),
		// length, and whether the length is made huge.
		var sgl []SGE
		for i := 0; i+4 <= len(spec) && len(sgl) < 4; i += 4 {
			which, at, l, huge := spec[i]%6, int8(spec[i+1]), uint32(spec[i+2]), spec[i+3]&1 == 1
			if huge {
				l = math.MaxUint32 - l
			}
			e := SGE{Length: l, LKey: 0xbad}
			switch {
			case which < 3:
				e.LKey, e.Addr = regs[which].LKey(), regs[which].Addr()+uint64(int64(at))
			case which == 3:
				e.LKey, e.Addr = other.LKey(), other.Addr()+uint64(int64(at))
			}
			sgl = append(sgl, e)
		}
		off, n := uint64(off16%300), int(n16%300)

		// The model.
		good := func(e SGE) bool {
			for i, r := range regs {
				if e.LKey == r.LKey() {
					lo, hi := r.Addr(), r.Addr()+32
					end, carry := bits.Add64(e.Addr, uint64(e.Length), 0)
					return e.Addr >= lo && carry == 0 && end <= hi && i != 2
				}
			}
			return false
		}
		ok := off+uint64(n) <= TotalLength(sgl)
		pos := uint64(0)
		for _, e := range sgl {
			if e.Length > 0 && n > 0 && pos < off+uint64(n) && off < pos+uint64(e.Length) && !good(e) {
				ok = false
			}
			pos += uint64(e.Length)
		}

		for _, b := range bufs {
			for i := range b {
				b[i] = byte(i)
			}
		}
		before := append(append(append([]byte{}, bufs[0]...), bufs[1]...), bufs[2]...)
		src := make([]byte, n)
		for i := range src {
			src[i] = 0x80 | byte(i)
		}
		got, err := tab.Scatter(1, sgl, off, src)
		after := append(append(append([]byte{}, bufs[0]...), bufs[1]...), bufs[2]...)
		if (err == nil) != ok {
			t.Fatalf("Scatter(%+v, off %d, %d bytes) = %d, %v; model says ok=%v", sgl, off, n, got, err, ok)
		}
		if err != nil {
			if got != 0 || string(after) != string(before) {
				t.Fatalf("failed Scatter returned %d or wrote memory", got)
			}
			return
		}
		back := make([]byte, n)
		if m, err := tab.Gather(1, sgl, off, back); err != nil || m != n {
			t.Fatalf("Gather after Scatter = %d, %v; want %d", m, err, n)
		}
		// Only the range changed: count changed bytes against bytes written.
		changed := 0
		for i := range after {
			if after[i] != before[i] {
				changed++
			}
		}
		if got != n || changed > n {
			t.Fatalf("Scatter = %d, changed %d bytes, want %d", got, changed, n)
		}
	})
}
