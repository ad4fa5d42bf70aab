package memory

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// sglFixture is three regions and an SGL over them, whose concatenation is
// 40 bytes: all of r1 (16), bytes 4-19 of r2 (16), an empty SGE with a bad
// key, all of r3 (8).
type sglFixture struct {
	tab        *Table
	b1, b2, b3 []byte
	r1, r2, r3 *Region
	sgl        []SGE
}

func newSGLFixture(t testing.TB) *sglFixture {
	f := &sglFixture{tab: NewTable(0), b1: alignedBuf(16), b2: alignedBuf(32), b3: alignedBuf(8)}
	f.r1 = mustRegister(t, f.tab, 5, f.b1, AccessLocalWrite)
	f.r2 = mustRegister(t, f.tab, 5, f.b2, AccessLocalWrite|AccessZeroBased)
	f.r3 = mustRegister(t, f.tab, 5, f.b3, AccessLocalWrite)
	f.sgl = []SGE{
		{Addr: f.r1.Addr(), Length: 16, LKey: f.r1.LKey()},
		{Addr: 4, Length: 16, LKey: f.r2.LKey()},
		{Addr: 0, Length: 0, LKey: 0xdead}, // skipped: zero length
		{Addr: f.r3.Addr(), Length: 8, LKey: f.r3.LKey()},
	}
	f.fill()
	return f
}

// fill sets every registered byte to a distinct value.
func (f *sglFixture) fill() {
	for i := range f.b1 {
		f.b1[i] = byte(i)
	}
	for i := range f.b2 {
		f.b2[i] = byte(0x40 + i)
	}
	for i := range f.b3 {
		f.b3[i] = byte(0x80 + i)
	}
}

// concat returns the SGL's concatenation as fill left it.
func (f *sglFixture) concat() []byte {
	return append(append(append([]byte{}, f.b1...), f.b2[4:20]...), f.b3...)
}

// snapshot copies all three buffers.
func (f *sglFixture) snapshot() []byte {
	return append(append(append([]byte{}, f.b1...), f.b2...), f.b3...)
}

func TestTotalLength(t *testing.T) {
	f := newSGLFixture(t)
	if got := TotalLength(f.sgl); got != 40 {
		t.Errorf("TotalLength = %d, want 40", got)
	}
	if got := TotalLength(nil); got != 0 {
		t.Errorf("TotalLength(nil) = %d", got)
	}
	big := []SGE{{Length: math.MaxUint32}, {Length: math.MaxUint32}}
	if got := TotalLength(big); got != 2*math.MaxUint32 {
		t.Errorf("TotalLength of two 4 GiB SGEs = %d", got)
	}
}

func TestGatherScatter(t *testing.T) {
	tests := []struct {
		name   string
		off, n uint64
		want   error
	}{
		{"all", 0, 40, nil},
		{"first SGE", 0, 16, nil},
		{"across first two", 10, 12, nil},
		{"across all", 15, 20, nil},
		{"last SGE", 32, 8, nil},
		{"last byte", 39, 1, nil},
		{"empty at end", 40, 0, nil},
		{"empty at start", 0, 0, nil},
		{"empty past end", 41, 0, ErrLength},
		{"one past end", 30, 11, ErrLength},
		{"off past end", 40, 1, ErrLength},
		{"off 2^64-1", math.MaxUint64, 1, ErrLength},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newSGLFixture(t)
			want := f.concat()
			dst := bytes.Repeat([]byte{0xee}, int(tt.n))
			n, err := f.tab.Gather(5, f.sgl, tt.off, dst)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Gather(off %d, %d bytes) error = %v, want %v", tt.off, tt.n, err, tt.want)
			}
			if err != nil {
				if n != 0 || !bytes.Equal(dst, bytes.Repeat([]byte{0xee}, int(tt.n))) {
					t.Errorf("failed Gather returned %d and wrote dst", n)
				}
			} else if n != int(tt.n) || !bytes.Equal(dst, want[tt.off:tt.off+tt.n]) {
				t.Errorf("Gather = %d, %x; want %d, %x", n, dst, tt.n, want[tt.off:tt.off+tt.n])
			}

			before := f.snapshot()
			src := make([]byte, tt.n)
			for i := range src {
				src[i] = 0xa0 ^ byte(i)
			}
			n, err = f.tab.Scatter(5, f.sgl, tt.off, src)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Scatter(off %d, %d bytes) error = %v, want %v", tt.off, tt.n, err, tt.want)
			}
			if err != nil {
				if n != 0 || !bytes.Equal(f.snapshot(), before) {
					t.Errorf("failed Scatter returned %d or wrote memory", n)
				}
				return
			}
			copy(want[tt.off:], src)
			if got := f.concat(); n != int(tt.n) || !bytes.Equal(got, want) {
				t.Errorf("after Scatter = %d: %x, want %d: %x", n, got, tt.n, want)
			}
			if !bytes.Equal(f.b2[:4], before[16:20]) || !bytes.Equal(f.b2[20:], before[36:48]) {
				t.Errorf("Scatter wrote bytes of r2 outside the SGE")
			}
		})
	}
}

// TestScatterBadSGE puts a bad SGE in the middle of the list: Gather and
// Scatter over it fail and Scatter writes nothing anywhere; ranges that do
// not reach it succeed.
func TestScatterBadSGE(t *testing.T) {
	f := newSGLFixture(t)
	ro := mustRegister(t, f.tab, 5, alignedBuf(8), 0)
	other := mustRegister(t, f.tab, 6, alignedBuf(8), AccessLocalWrite)
	dead := mustRegister(t, f.tab, 5, alignedBuf(8), AccessLocalWrite)
	if err := f.tab.Deregister(dead); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		bad     SGE
		gather  error // Gather only reads
		scatter error
	}{
		{"unknown key", SGE{Addr: 0, Length: 8, LKey: 0x12345678}, ErrKey, ErrKey},
		{"deregistered", SGE{Addr: dead.Addr(), Length: 8, LKey: dead.LKey()}, ErrKey, ErrKey},
		{"other PD", SGE{Addr: other.Addr(), Length: 8, LKey: other.LKey()}, ErrPD, ErrPD},
		{"no LOCAL_WRITE", SGE{Addr: ro.Addr(), Length: 8, LKey: ro.LKey()}, nil, ErrAccess},
		{"SGE longer than region", SGE{Addr: f.r2.Addr() + 30, Length: 8, LKey: f.r2.LKey()}, ErrBounds, ErrBounds},
		{"SGE wraps", SGE{Addr: math.MaxUint64 - 3, Length: 8, LKey: f.r1.LKey()}, ErrBounds, ErrBounds},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.fill()
			sgl := []SGE{f.sgl[0], f.sgl[1], tt.bad, f.sgl[3]} // 48 bytes, bad at 32-39
			before := f.snapshot()
			src := bytes.Repeat([]byte{0x5a}, 48)
			n, err := f.tab.Scatter(5, sgl, 0, src)
			if !errors.Is(err, tt.scatter) {
				t.Fatalf("Scatter error = %v, want %v", err, tt.scatter)
			}
			if err == nil {
				return
			}
			t.Log(err)
			if n != 0 || !bytes.Equal(f.snapshot(), before) {
				t.Fatalf("failed Scatter returned %d and wrote memory", n)
			}
			if _, err := f.tab.Gather(5, sgl, 0, make([]byte, 48)); !errors.Is(err, tt.gather) {
				t.Errorf("Gather error = %v, want %v", err, tt.gather)
			}
			// Ranges that stop before the bad SGE, or start after it, do not check it.
			if _, err := f.tab.Scatter(5, sgl, 0, src[:32]); err != nil {
				t.Errorf("Scatter of the first 32 bytes: %v", err)
			}
			if _, err := f.tab.Scatter(5, sgl, 40, src[:8]); err != nil {
				t.Errorf("Scatter of the last 8 bytes: %v", err)
			}
			if _, err := f.tab.Scatter(5, sgl, 31, src[:2]); !errors.Is(err, tt.scatter) {
				t.Errorf("Scatter of 2 bytes into the bad SGE: %v, want %v", err, tt.scatter)
			}
		})
	}
	if _, err := f.tab.Scatter(6, f.sgl, 0, make([]byte, 40)); !errors.Is(err, ErrPD) {
		t.Errorf("Scatter from another PD: %v, want ErrPD", err)
	}
}

// TestLongSGL copies over more SGEs than one round resolves.
func TestLongSGL(t *testing.T) {
	tab := NewTable(0)
	buf := alignedBuf(1000)
	r := mustRegister(t, tab, 1, buf, AccessLocalWrite)
	var sgl []SGE
	var want []byte
	for i := range 3 * maxPieces {
		// SGEs of 1 to 7 bytes, in reverse order through buf.
		l := uint32(i%7 + 1)
		at := 900 - 18*i
		sgl = append(sgl, SGE{Addr: r.Addr() + uint64(at), Length: l, LKey: r.LKey()})
		for j := range int(l) {
			buf[at+j] = byte(i*8 + j)
			want = append(want, byte(i*8+j))
		}
	}
	for _, off := range []uint64{0, 1, 5, 30} {
		got := make([]byte, len(want)-int(off))
		if n, err := tab.Gather(1, sgl, off, got); err != nil || n != len(got) || !bytes.Equal(got, want[off:]) {
			t.Fatalf("Gather(off %d) = %d, %v:\n%x, want\n%x", off, n, err, got, want[off:])
		}
		src := bytes.Clone(got)
		for i := range src {
			src[i] ^= 0xff
		}
		if n, err := tab.Scatter(1, sgl, off, src); err != nil || n != len(src) {
			t.Fatalf("Scatter(off %d) = %d, %v", off, n, err)
		}
		back := make([]byte, len(src))
		tab.Gather(1, sgl, off, back)
		if !bytes.Equal(back, src) {
			t.Fatalf("Scatter(off %d) then Gather: %x, want %x", off, back, src)
		}
		tab.Scatter(1, sgl, off, got) // restore
	}
	bad := append([]SGE{}, sgl...)
	bad[len(bad)-1].LKey ^= 1
	before := bytes.Clone(buf)
	if _, err := tab.Scatter(1, bad, 0, make([]byte, len(want))); !errors.Is(err, ErrKey) {
		t.Fatalf("Scatter with the last of %d SGEs bad: %v, want ErrKey", len(bad), err)
	}
	if !bytes.Equal(buf, before) {
		t.Error("failed Scatter over a long list wrote memory")
	}
}
