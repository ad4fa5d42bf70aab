package memory

import (
	"errors"
	"math"
	"testing"
	"unsafe"
)

// alignedBuf returns n bytes whose first byte is 8-byte aligned.
func alignedBuf(n int) []byte {
	w := make([]uint64, (n+7)/8+1)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

// addrOf returns the address of b[0].
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

func mustRegister(t testing.TB, tab *Table, pd uint32, buf []byte, a Access) *Region {
	t.Helper()
	r, err := tab.Register(pd, buf, a)
	if err != nil {
		t.Fatalf("Register(%d, %d bytes, %v): %v", pd, len(buf), a, err)
	}
	return r
}

const rw = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead

func TestRegionAccessors(t *testing.T) {
	tab := NewTable(0)
	buf := alignedBuf(64)
	r := mustRegister(t, tab, 7, buf, rw)
	if r.LKey() != r.RKey() || r.LKey() == 0 {
		t.Errorf("LKey %#x, RKey %#x: want equal and nonzero", r.LKey(), r.RKey())
	}
	if r.Addr() != addrOf(buf) {
		t.Errorf("Addr() = %#x, want &buf[0] = %#x", r.Addr(), addrOf(buf))
	}
	if r.Len() != 64 || r.PD() != 7 || r.Access() != rw || !r.Valid() {
		t.Errorf("Len %d PD %d Access %v Valid %v, want 64 7 %v true", r.Len(), r.PD(), r.Access(), r.Valid(), rw)
	}
	if b := r.Bytes(); &b[0] != &buf[0] || len(b) != 64 || cap(b) != 64 {
		t.Errorf("Bytes() is not buf with its capacity clipped")
	}
	z := mustRegister(t, tab, 7, buf, rw|AccessZeroBased)
	if z.Addr() != 0 {
		t.Errorf("zero-based Addr() = %#x, want 0", z.Addr())
	}
	e := mustRegister(t, tab, 7, buf[:0], rw)
	if e.Addr() != 0 || e.Len() != 0 {
		t.Errorf("zero-length region: Addr %#x Len %d, want 0 0", e.Addr(), e.Len())
	}
	n := mustRegister(t, tab, 7, nil, 0)
	if n.Addr() != 0 || n.Len() != 0 {
		t.Errorf("nil region: Addr %#x Len %d, want 0 0", n.Addr(), n.Len())
	}
}

func TestCheckRemote(t *testing.T) {
	tab := NewTable(0)
	buf := alignedBuf(64)
	r := mustRegister(t, tab, 1, buf, rw)
	z := mustRegister(t, tab, 1, buf, rw|AccessZeroBased)
	e := mustRegister(t, tab, 1, nil, rw)
	a := r.Addr()
	const max = math.MaxUint64
	tests := []struct {
		name   string
		r      *Region
		va, n  uint64
		need   Access
		want   error
		offset uint64 // of the result in buf, when want is nil
	}{
		{"first byte", r, a, 1, AccessRemoteRead, nil, 0},
		{"whole", r, a, 64, AccessRemoteWrite, nil, 0},
		{"last byte", r, a + 63, 1, AccessRemoteRead, nil, 63},
		{"one past", r, a + 64, 1, AccessRemoteRead, ErrBounds, 0},
		{"across the end", r, a + 63, 2, AccessRemoteRead, ErrBounds, 0},
		{"one too long", r, a, 65, AccessRemoteRead, ErrBounds, 0},
		{"before", r, a - 1, 1, AccessRemoteRead, ErrBounds, 0},
		{"before into", r, a - 1, 2, AccessRemoteRead, ErrBounds, 0},
		{"zero-length at start", r, a, 0, AccessRemoteRead, nil, 0},
		{"zero-length at end", r, a + 64, 0, AccessRemoteRead, nil, 64},
		{"zero-length one past end", r, a + 65, 0, AccessRemoteRead, ErrBounds, 0},
		{"zero-length before", r, a - 1, 0, AccessRemoteRead, ErrBounds, 0},
		{"length 2^64-1", r, a, max, AccessRemoteRead, ErrBounds, 0},
		{"wraps to start", r, a + 1, max, AccessRemoteRead, ErrBounds, 0},
		{"wraps into region", r, a + 32, max - 15, AccessRemoteRead, ErrBounds, 0},
		{"va 2^64-1", r, max, 2, AccessRemoteRead, ErrBounds, 0},
		{"va 0", r, 0, a + 8, AccessRemoteRead, ErrBounds, 0},
		{"no atomic right", r, a, 8, AccessRemoteAtomic, ErrAccess, 0},
		{"no right checked before bounds", r, a + 64, 8, AccessRemoteAtomic, ErrAccess, 0},
		{"no rights needed", r, a, 64, 0, nil, 0},
		{"zero-based first", z, 0, 1, AccessRemoteRead, nil, 0},
		{"zero-based last", z, 63, 1, AccessRemoteRead, nil, 63},
		{"zero-based one past", z, 64, 1, AccessRemoteRead, ErrBounds, 0},
		{"zero-based real address", z, a, 1, AccessRemoteRead, ErrBounds, 0},
		{"zero-based wrap", z, 1, max, AccessRemoteRead, ErrBounds, 0},
		{"zero-length region, empty", e, 0, 0, AccessRemoteWrite, nil, 0},
		{"zero-length region, one byte", e, 0, 1, AccessRemoteWrite, ErrBounds, 0},
		{"zero-length region, one past", e, 1, 0, AccessRemoteWrite, ErrBounds, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.r.CheckRemote(tt.va, tt.n, tt.need)
			if !errors.Is(err, tt.want) {
				t.Fatalf("CheckRemote(%#x, %#x, %v) error = %v, want %v", tt.va, tt.n, tt.need, err, tt.want)
			}
			if err != nil {
				if b != nil {
					t.Errorf("failed check returned %d bytes", len(b))
				}
				return
			}
			if uint64(len(b)) != tt.n || uint64(cap(b)) != tt.n {
				t.Fatalf("got len %d cap %d, want %d", len(b), cap(b), tt.n)
			}
			if tt.n > 0 && &b[0] != &tt.r.Bytes()[tt.offset] {
				t.Errorf("result starts at %p, want &buf[%d] = %p", &b[0], tt.offset, &tt.r.Bytes()[tt.offset])
			}
		})
	}
}

func TestCheckLocal(t *testing.T) {
	tab := NewTable(0)
	buf := alignedBuf(32)
	ro := mustRegister(t, tab, 1, buf, AccessRemoteRead)
	wr := mustRegister(t, tab, 1, buf, AccessLocalWrite)
	tests := []struct {
		name  string
		r     *Region
		va, n uint64
		write bool
		want  error
	}{
		{"read without rights", ro, ro.Addr(), 32, false, nil},
		{"write without LOCAL_WRITE", ro, ro.Addr(), 1, true, ErrAccess},
		{"write", wr, wr.Addr() + 31, 1, true, nil},
		{"write past end", wr, wr.Addr() + 31, 2, true, ErrBounds},
		{"read wrap", wr, wr.Addr() + 1, math.MaxUint64, false, ErrBounds},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.r.CheckLocal(tt.va, tt.n, tt.write)
			if !errors.Is(err, tt.want) {
				t.Fatalf("CheckLocal(%#x, %d, %v) error = %v, want %v", tt.va, tt.n, tt.write, err, tt.want)
			}
			if err == nil && uint64(len(b)) != tt.n {
				t.Errorf("got %d bytes, want %d", len(b), tt.n)
			}
		})
	}
}

func TestCheckAtomic(t *testing.T) {
	tab := NewTable(0)
	buf := alignedBuf(64)
	at := AccessLocalWrite | AccessRemoteAtomic
	r := mustRegister(t, tab, 1, buf, at)
	ro := mustRegister(t, tab, 1, buf, AccessRemoteRead)
	odd := mustRegister(t, tab, 1, buf[1:33], at|AccessZeroBased) // offsets aligned, memory not
	a := r.Addr()
	tests := []struct {
		name string
		r    *Region
		va   uint64
		want error
	}{
		{"first word", r, a, nil},
		{"last word", r, a + 56, nil},
		{"misaligned va", r, a + 4, ErrAlign},
		{"last bytes misaligned", r, a + 57, ErrBounds}, // bounds before alignment, as rxe
		{"past end", r, a + 64, ErrBounds},
		{"no atomic right", ro, a, ErrAccess},
		{"misaligned memory", odd, 8, ErrAlign},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.r.CheckAtomic(tt.va, AccessRemoteAtomic)
			if !errors.Is(err, tt.want) {
				t.Fatalf("CheckAtomic(%#x) error = %v, want %v", tt.va, err, tt.want)
			}
			if err == nil && (len(b) != 8 || addrOf(b) != tt.va) {
				t.Errorf("got %d bytes at %#x, want 8 at %#x", len(b), addrOf(b), tt.va)
			}
		})
	}
}
