package memory

import (
	"testing"
)

// TestHotPathAllocs checks that lookups, checks, copies and atomics that
// succeed allocate nothing.
func TestHotPathAllocs(t *testing.T) {
	f := newSGLFixture(t)
	at := mustRegister(t, f.tab, 5, alignedBuf(64), AccessLocalWrite|AccessRemoteAtomic|AccessRemoteWrite)
	for range 1000 { // a larger index
		mustRegister(t, f.tab, 9, nil, 0)
	}
	long := make([]SGE, 3*maxPieces)
	for i := range long {
		long[i] = SGE{Addr: f.r1.Addr() + uint64(i%16), Length: 1, LKey: f.r1.LKey()}
	}
	buf := make([]byte, 64)
	key := at.RKey()
	tests := []struct {
		name string
		fn   func() error
	}{
		{"Local", func() error { _, err := f.tab.Local(5, key); return err }},
		{"Remote", func() error { _, err := f.tab.Remote(5, key); return err }},
		{"CheckRemote", func() error { _, err := at.CheckRemote(at.Addr()+8, 32, AccessRemoteWrite); return err }},
		{"CheckLocal", func() error { _, err := at.CheckLocal(at.Addr(), 64, true); return err }},
		{"CheckAtomic", func() error { _, err := at.CheckAtomic(at.Addr()+8, AccessRemoteAtomic); return err }},
		{"Gather", func() error { _, err := f.tab.Gather(5, f.sgl, 0, buf[:40]); return err }},
		{"Scatter", func() error { _, err := f.tab.Scatter(5, f.sgl, 3, buf[:30]); return err }},
		{"Gather long SGL", func() error { _, err := f.tab.Gather(5, long, 0, buf[:len(long)]); return err }},
		{"Scatter long SGL", func() error { _, err := f.tab.Scatter(5, long, 1, buf[:len(long)-1]); return err }},
		{"FetchAdd", func() error { FetchAdd(at.Bytes()[8:16], 1); return nil }},
		{"CompareSwap", func() error { CompareSwap(at.Bytes()[8:16], 1, 2); return nil }},
		{"lookup and check", func() error {
			v, err := f.tab.Remote(5, key)
			if err == nil {
				_, err = v.CheckRemote(v.Addr(), 64, AccessRemoteWrite)
			}
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.fn(); err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(100, func() { tt.fn() }); n != 0 {
				t.Errorf("%v allocations per run, want 0", n)
			}
		})
	}
}

func BenchmarkRemote(b *testing.B) {
	tab := NewTable(0)
	keys := make([]uint32, 1024)
	for i := range keys {
		keys[i] = mustRegister(b, tab, 1, alignedBuf(64), rw).RKey()
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := tab.Remote(1, keys[i&1023]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkRemoteParallel looks up one key from all Ps, as QPs that share
// one MR do.
func BenchmarkRemoteParallel(b *testing.B) {
	tab := NewTable(0)
	r := mustRegister(b, tab, 1, alignedBuf(4096), rw)
	key, va := r.RKey(), r.Addr()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v, err := tab.Remote(1, key)
			if err == nil {
				_, err = v.CheckRemote(va, 4096, AccessRemoteWrite)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGather4K(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(map[int]string{1: "1SGE", 4: "4SGE"}[n], func(b *testing.B) {
			tab := NewTable(0)
			var sgl []SGE
			for range n {
				r := mustRegister(b, tab, 1, alignedBuf(4096/n), AccessLocalWrite)
				sgl = append(sgl, SGE{Addr: r.Addr(), Length: uint32(4096 / n), LKey: r.LKey()})
			}
			dst := make([]byte, 4096)
			b.SetBytes(4096)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tab.Gather(1, sgl, 0, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkScatter4K(b *testing.B) {
	tab := NewTable(0)
	r := mustRegister(b, tab, 1, alignedBuf(1<<20), AccessLocalWrite)
	sgl := []SGE{{Addr: r.Addr(), Length: 1 << 20, LKey: r.LKey()}}
	src := make([]byte, 4096)
	b.SetBytes(4096)
	b.ReportAllocs()
	off := uint64(0)
	for b.Loop() {
		if _, err := tab.Scatter(1, sgl, off, src); err != nil {
			b.Fatal(err)
		}
		off = (off + 4096) % (1 << 20)
	}
}
