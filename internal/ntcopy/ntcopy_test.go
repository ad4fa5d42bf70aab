package ntcopy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestCopy compares Copy with copy for every alignment of both ends within
// a cache line and lengths around the block and minimum sizes, and checks
// that no byte outside the copied range changes.
func TestCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 9000)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	lengths := []int{0, 1, 63, 64, 65, 255, 256, 257, 319, 320, 1024, 1500, 4096, 4097, 8192}
	for _, n := range lengths {
		for dstOff := range block {
			for _, srcOff := range []int{0, 1, 15, 16, 33, 63} {
				got := make([]byte, n+2*block+16)
				want := make([]byte, len(got))
				for i := range got {
					got[i], want[i] = 0xa5, 0xa5
				}
				s := src[srcOff : srcOff+n]
				if c := Copy(got[dstOff:dstOff+n], s); c != n {
					t.Fatalf("n %d: Copy returned %d", n, c)
				}
				copy(want[dstOff:dstOff+n], s)
				if !bytes.Equal(got, want) {
					t.Fatalf("n %d, dst offset %d, src offset %d: Copy differs from copy", n, dstOff, srcOff)
				}
			}
		}
	}
}

// TestCopyLengths checks that Copy copies the shorter of the two, as copy.
func TestCopyLengths(t *testing.T) {
	src := bytes.Repeat([]byte{7}, 1000)
	dst := make([]byte, 600)
	if n := Copy(dst, src); n != 600 || !bytes.Equal(dst, src[:600]) {
		t.Fatalf("long source: Copy returned %d", n)
	}
	dst = make([]byte, 1000)
	if n := Copy(dst, src[:300]); n != 300 || !bytes.Equal(dst[:300], src[:300]) || dst[300] != 0 {
		t.Fatalf("short source: Copy returned %d", n)
	}
}

// BenchmarkCopy copies 4 KiB packets (the MTU) into a target of the given
// size, cycling through it: a small target stays in cache, where copy is
// faster; one larger than the last-level cache is written back to memory
// whatever the copy does, and Copy saves the read of each line first.
func BenchmarkCopy(b *testing.B) {
	src := make([]byte, 4096)
	for _, size := range []int{64 << 10, 64 << 20} {
		dst := make([]byte, size)
		for _, c := range []struct {
			name string
			fn   func(dst, src []byte) int
		}{{"copy", func(d, s []byte) int { return copy(d, s) }}, {"nt", Copy}} {
			b.Run(fmt.Sprintf("%s/%dKiB", c.name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(len(src)))
				off := 0
				for b.Loop() {
					c.fn(dst[off:off+len(src)], src)
					if off += len(src); off == len(dst) {
						off = 0
					}
				}
			})
		}
	}
}

// TestCopyAllocs: Copy is on the receive path of every cold WRITE packet
// and allocates nothing.
func TestCopyAllocs(t *testing.T) {
	src, dst := make([]byte, 4096), make([]byte, 4096+64)
	if n := testing.AllocsPerRun(100, func() { Copy(dst[3:], src) }); n != 0 {
		t.Fatalf("Copy allocates %v times", n)
	}
}
