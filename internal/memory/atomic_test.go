package memory

import (
	"encoding/binary"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

func TestAtomics(t *testing.T) {
	tests := []struct {
		name    string
		init    uint64
		op      func(b []byte) uint64
		wantOld uint64
		want    uint64
	}{
		{"cmpswap equal", 5, func(b []byte) uint64 { return CompareSwap(b, 5, 9) }, 5, 9},
		{"cmpswap differ", 5, func(b []byte) uint64 { return CompareSwap(b, 6, 9) }, 5, 5},
		{"cmpswap high bits", 1 << 63, func(b []byte) uint64 { return CompareSwap(b, 1<<63, 1) }, 1 << 63, 1},
		{"fetchadd", 40, func(b []byte) uint64 { return FetchAdd(b, 2) }, 40, 42},
		{"fetchadd wraps", math.MaxUint64, func(b []byte) uint64 { return FetchAdd(b, 2) }, math.MaxUint64, 1},
		{"fetchadd 'subtract'", 10, func(b []byte) uint64 { return FetchAdd(b, math.MaxUint64) }, 10, 9},
		{"atomic write", 7, func(b []byte) uint64 { AtomicWrite(b, 0x0102030405060708); return 7 }, 7, 0x0102030405060708},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := alignedBuf(16)[8:16]
			binary.NativeEndian.PutUint64(b, tt.init)
			if old := tt.op(b); old != tt.wantOld {
				t.Errorf("old = %#x, want %#x", old, tt.wantOld)
			}
			// Memory holds host byte order, as rxe's *(u64 *)vaddr.
			if got := binary.NativeEndian.Uint64(b); got != tt.want {
				t.Errorf("memory = %#x, want %#x", got, tt.want)
			}
		})
	}
}

func TestAtomicPanics(t *testing.T) {
	buf := alignedBuf(24)
	for _, tt := range []struct {
		name string
		b    []byte
	}{
		{"misaligned", buf[1:9]},
		{"short", buf[:7]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			FetchAdd(tt.b, 1)
		})
	}
}

// TestAtomicsConcurrent runs FetchAdd, CompareSwap and sync/atomic
// increments from many goroutines on one word: no update is lost.
func TestAtomicsConcurrent(t *testing.T) {
	tab := NewTable(0)
	r := mustRegister(t, tab, 1, alignedBuf(64), AccessLocalWrite|AccessRemoteAtomic)
	const workers, each = 16, 5000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			v, err := tab.Remote(1, r.RKey())
			if err != nil {
				t.Error(err)
				return
			}
			b, err := v.CheckAtomic(r.Addr()+8, AccessRemoteAtomic)
			if err != nil {
				t.Error(err)
				return
			}
			for range each {
				switch w % 3 {
				case 0:
					FetchAdd(b, 3)
					continue
				case 1: // a local program's atomic on the same memory
					atomic.AddUint64((*uint64)(unsafe.Pointer(&b[0])), 3)
					continue
				}
				for old := uint64(0); ; {
					if got := CompareSwap(b, old, old+3); got == old {
						break
					} else {
						old = got
					}
				}
			}
		})
	}
	wg.Wait()
	if got := binary.NativeEndian.Uint64(r.Bytes()[8:]); got != 3*workers*each {
		t.Errorf("sum = %d, want %d", got, 3*workers*each)
	}
}
