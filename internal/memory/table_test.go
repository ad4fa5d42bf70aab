package memory

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

func TestLookup(t *testing.T) {
	tab := NewTable(0)
	r := mustRegister(t, tab, 3, alignedBuf(16), rw)
	other := mustRegister(t, tab, 4, alignedBuf(16), rw)
	key := r.LKey()
	tests := []struct {
		name   string
		lookup func(pd, key uint32) (*Region, error)
		pd     uint32
		key    uint32
		want   error
	}{
		{"local", tab.Local, 3, key, nil},
		{"remote", tab.Remote, 3, key, nil},
		{"local other PD", tab.Local, 4, key, ErrPD},
		{"remote other PD", tab.Remote, 4, key, ErrPD},
		{"remote key of other PD", tab.Remote, 3, other.RKey(), ErrPD},
		{"key 0", tab.Remote, 3, 0, ErrKey},
		{"unknown key", tab.Remote, 3, key ^ 1, ErrKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := tt.lookup(tt.pd, tt.key)
			if !errors.Is(err, tt.want) {
				t.Fatalf("lookup(%d, %#x) error = %v, want %v", tt.pd, tt.key, err, tt.want)
			}
			if err != nil {
				return
			}
			if v.LKey() != tt.key || v.PD() != tt.pd || v.Addr() != r.Addr() || !v.Valid() {
				t.Errorf("view: key %#x PD %d Addr %#x Valid %v, want %#x %d %#x true",
					v.LKey(), v.PD(), v.Addr(), v.Valid(), tt.key, tt.pd, r.Addr())
			}
		})
	}
}

func TestDeregister(t *testing.T) {
	tab := NewTable(0)
	r := mustRegister(t, tab, 1, alignedBuf(16), rw)
	key := r.RKey()
	v, err := tab.Remote(1, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := tab.Deregister(r); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	if tab.Len() != 0 {
		t.Errorf("Len() = %d after Deregister, want 0", tab.Len())
	}
	if _, err := tab.Remote(1, key); !errors.Is(err, ErrKey) {
		t.Errorf("Remote after Deregister: %v, want ErrKey", err)
	}
	if _, err := tab.Local(1, key); !errors.Is(err, ErrKey) {
		t.Errorf("Local after Deregister: %v, want ErrKey", err)
	}
	if r.Valid() || v.Valid() {
		t.Errorf("Valid after Deregister: region %v view %v, want false", r.Valid(), v.Valid())
	}
	for _, x := range []*Region{r, v} {
		if _, err := x.CheckRemote(x.Addr(), 1, AccessRemoteRead); !errors.Is(err, ErrKey) {
			t.Errorf("CheckRemote after Deregister: %v, want ErrKey", err)
		}
		if _, err := x.CheckLocal(x.Addr(), 1, false); !errors.Is(err, ErrKey) {
			t.Errorf("CheckLocal after Deregister: %v, want ErrKey", err)
		}
	}
	if err := tab.Deregister(r); !errors.Is(err, ErrKey) {
		t.Errorf("second Deregister: %v, want ErrKey", err)
	}
	if err := tab.Deregister(nil); !errors.Is(err, ErrKey) {
		t.Errorf("Deregister(nil): %v, want ErrKey", err)
	}
	foreign := mustRegister(t, NewTable(0), 1, nil, 0)
	if err := tab.Deregister(foreign); !errors.Is(err, ErrKey) {
		t.Errorf("Deregister of another table's region: %v, want ErrKey", err)
	}

	// Deregistering through a view ends the registration for everyone.
	r2 := mustRegister(t, tab, 1, alignedBuf(16), rw)
	v2, _ := tab.Local(1, r2.LKey())
	if err := tab.Deregister(v2); err != nil {
		t.Fatalf("Deregister(view): %v", err)
	}
	if r2.Valid() || tab.Len() != 0 {
		t.Errorf("after Deregister(view): Valid %v Len %d, want false 0", r2.Valid(), tab.Len())
	}
}

func TestReregister(t *testing.T) {
	tab := NewTable(0)
	buf1, buf2 := alignedBuf(16), alignedBuf(32)
	r := mustRegister(t, tab, 1, buf1, rw)
	oldKey := r.RKey()
	old, _ := tab.Remote(1, oldKey)

	if err := tab.Reregister(r, buf2, AccessLocalWrite|AccessRemoteAtomic); err != nil {
		t.Fatalf("Reregister: %v", err)
	}
	if r.RKey() == oldKey || r.LKey() != r.RKey() {
		t.Errorf("keys after Reregister: %#x/%#x, old %#x: want new and equal", r.LKey(), r.RKey(), oldKey)
	}
	if r.Addr() != addrOf(buf2) || r.Len() != 32 || r.Access() != AccessLocalWrite|AccessRemoteAtomic || !r.Valid() {
		t.Errorf("after Reregister: Addr %#x Len %d Access %v Valid %v", r.Addr(), r.Len(), r.Access(), r.Valid())
	}
	if _, err := tab.Remote(1, oldKey); !errors.Is(err, ErrKey) {
		t.Errorf("old rkey after Reregister: %v, want ErrKey", err)
	}
	// A view of the old registration keeps describing it, and its checks fail.
	if old.Valid() || old.RKey() != oldKey || old.Addr() != addrOf(buf1) {
		t.Errorf("old view: Valid %v key %#x Addr %#x", old.Valid(), old.RKey(), old.Addr())
	}
	if _, err := old.CheckRemote(old.Addr(), 8, AccessRemoteRead); !errors.Is(err, ErrKey) {
		t.Errorf("old view CheckRemote: %v, want ErrKey", err)
	}
	v, err := tab.Remote(1, r.RKey())
	if err != nil || v.Addr() != addrOf(buf2) {
		t.Fatalf("new rkey: %v", err)
	}
	if tab.Len() != 1 {
		t.Errorf("Len() = %d, want 1", tab.Len())
	}

	// nil keeps the buffer; through a view; zero-based.
	key2 := r.RKey()
	if err := tab.Reregister(v, nil, AccessRemoteRead|AccessZeroBased); err != nil {
		t.Fatalf("Reregister(view, nil): %v", err)
	}
	if r.RKey() == key2 || r.Len() != 32 || &r.Bytes()[0] != &buf2[0] || r.Addr() != 0 {
		t.Errorf("after Reregister(nil): key %#x (was %#x) Len %d Addr %#x", r.RKey(), key2, r.Len(), r.Addr())
	}
	if v.Valid() {
		t.Error("view still valid after Reregister")
	}

	// Errors change nothing.
	key3 := r.RKey()
	if err := tab.Reregister(r, buf1, AccessRemoteWrite); !errors.Is(err, ErrInvalidAccess) {
		t.Errorf("Reregister(REMOTE_WRITE): %v, want ErrInvalidAccess", err)
	}
	if err := tab.Reregister(v, buf1, 0); !errors.Is(err, ErrKey) {
		t.Errorf("Reregister(stale view): %v, want ErrKey", err)
	}
	if r.RKey() != key3 || r.Len() != 32 || !r.Valid() {
		t.Errorf("failed Reregister changed the region")
	}
	if err := tab.Deregister(r); err != nil {
		t.Fatal(err)
	}
	if err := tab.Reregister(r, nil, 0); !errors.Is(err, ErrKey) {
		t.Errorf("Reregister after Deregister: %v, want ErrKey", err)
	}
}

func TestTooMany(t *testing.T) {
	tab := NewTable(2)
	a := mustRegister(t, tab, 1, nil, 0)
	mustRegister(t, tab, 1, nil, 0)
	if _, err := tab.Register(1, nil, 0); !errors.Is(err, ErrTooMany) {
		t.Fatalf("third Register: %v, want ErrTooMany", err)
	}
	if err := tab.Reregister(a, alignedBuf(8), 0); err != nil {
		t.Errorf("Reregister in a full table: %v", err)
	}
	if err := tab.Deregister(a); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, tab, 1, nil, 0)
	if tab.Len() != 2 {
		t.Errorf("Len() = %d, want 2", tab.Len())
	}
}

// TestChurn registers and deregisters many regions, so that the index
// grows, shrinks and fills with tombstones, and checks every key.
func TestChurn(t *testing.T) {
	tab := NewTable(0)
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[uint32]*Region{}
	dead := map[uint32]bool{}
	for round := range 20 {
		n := 2000
		if round%2 == 1 {
			n = 200
		}
		for range n {
			r := mustRegister(t, tab, uint32(rng.IntN(4)), nil, 0)
			live[r.LKey()] = r
		}
		for k, r := range live {
			if rng.IntN(3) > 0 {
				if err := tab.Deregister(r); err != nil {
					t.Fatal(err)
				}
				delete(live, k)
				dead[k] = true
			}
		}
		if tab.Len() != len(live) {
			t.Fatalf("round %d: Len() = %d, want %d", round, tab.Len(), len(live))
		}
		for k, r := range live {
			if v, err := tab.Local(r.PD(), k); err != nil || v.LKey() != k {
				t.Fatalf("round %d: live key %#x: %v", round, k, err)
			}
		}
		for k := range dead {
			if _, err := tab.Local(0, k); live[k] == nil && !errors.Is(err, ErrKey) {
				t.Fatalf("round %d: dead key %#x: %v", round, k, err)
			}
		}
		x := tab.idx.Load()
		if 2*(tab.live+tab.tombs) > len(x.slots) {
			t.Fatalf("index over half full: %d live, %d tombstones, %d slots", tab.live, tab.tombs, len(x.slots))
		}
	}
	for _, r := range live {
		if err := tab.Deregister(r); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(tab.idx.Load().slots); n != minSlots {
		t.Errorf("empty index has %d slots, want %d", n, minSlots)
	}
}

// TestConcurrent looks keys up from many goroutines while others register,
// reregister and deregister: a lookup finds the key it asked for, and once
// Deregister or Reregister returns, the old key is gone. Run with -race.
func TestConcurrent(t *testing.T) {
	tab := NewTable(0)
	var keys [64]atomic.Uint32
	for i := range keys {
		keys[i].Store(mustRegister(t, tab, 1, alignedBuf(64), rw).RKey())
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			i := w
			for !stop.Load() {
				i = (i + 1) % len(keys)
				k := keys[i].Load()
				v, err := tab.Remote(1, k)
				if err != nil {
					continue // replaced meanwhile
				}
				if v.RKey() != k {
					t.Errorf("Remote(%#x) returned key %#x", k, v.RKey())
					return
				}
				if b, err := v.CheckRemote(v.Addr(), 64, AccessRemoteWrite); err == nil {
					b[w]++ // each reader writes its own byte
				}
			}
		})
	}
	for i := range 2000 {
		slot := &keys[i%len(keys)]
		v, err := tab.Remote(1, slot.Load())
		if err != nil {
			t.Fatal(err)
		}
		old := v.RKey()
		if i%2 == 0 {
			err = tab.Reregister(v, nil, rw)
		} else {
			err = tab.Deregister(v)
			if err == nil {
				v = mustRegister(t, tab, 1, alignedBuf(64), rw)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tab.Remote(1, old); !errors.Is(err, ErrKey) {
			t.Fatalf("old key %#x after change: %v", old, err)
		}
		slot.Store(currentKey(t, v))
	}
	stop.Store(true)
	wg.Wait()
}

// currentKey returns the current key of the region r belongs to.
func currentKey(t *testing.T, r *Region) uint32 {
	t.Helper()
	h := r.g.Load().handle
	if !h.Valid() {
		t.Fatal("region not valid")
	}
	return h.RKey()
}

func TestInvalidate(t *testing.T) {
	tb := NewTable(0)
	buf := make([]byte, 64)
	r, err := tb.Register(1, buf, AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	key := r.RKey()
	if err := tb.Invalidate(2, key); !errors.Is(err, ErrPD) {
		t.Errorf("Invalidate from another PD: %v, want ErrPD", err)
	}
	if err := tb.Invalidate(1, key); err != nil {
		t.Fatalf("Invalidate: %v", err)
	}
	if _, err := tb.Remote(1, key); !errors.Is(err, ErrKey) {
		t.Errorf("Remote after Invalidate: %v, want ErrKey", err)
	}
	if err := tb.Invalidate(1, key); !errors.Is(err, ErrKey) {
		t.Errorf("second Invalidate: %v, want ErrKey", err)
	}
	if err := tb.Reregister(r, nil, r.Access()); err != nil {
		t.Fatalf("Reregister after Invalidate: %v", err)
	}
	if r.RKey() == key || !r.Valid() {
		t.Errorf("after Reregister: key %#x (old %#x) valid %v", r.RKey(), key, r.Valid())
	}
	if _, err := tb.Remote(1, r.RKey()); err != nil {
		t.Errorf("new key: %v", err)
	}
	tb.Invalidate(1, r.RKey())
	if err := tb.Deregister(r); err != nil {
		t.Errorf("Deregister of an invalidated region: %v", err)
	}
	if err := tb.Deregister(r); !errors.Is(err, ErrKey) {
		t.Errorf("second Deregister: %v, want ErrKey", err)
	}
}
