package memory

import "sync/atomic"

// index maps keys to registrations. It is an open-addressing hash table
// with linear probing that readers search without locks: every slot is an
// atomic pointer, a removed registration leaves a tombstone, and growing,
// shrinking or purging tombstones builds a new index and publishes it with
// one atomic store. Writers hold the Table's mutex.
//
// Keys are uniformly random (see keygen), so the low bits of the key are
// the hash. At most half the slots are in use (registrations plus
// tombstones), so every search ends at an empty slot after a few steps: an
// index is never written once a newer one is published, which keeps that
// true for readers still searching an old index.
type index struct {
	mask  uint32
	slots []atomic.Pointer[registration]
}

// minSlots is the size of the smallest index.
const minSlots = 64

// tombstone fills the slot of a removed registration; searches go past it.
var tombstone registration

func newIndex(slots int) *index {
	return &index{mask: uint32(slots - 1), slots: make([]atomic.Pointer[registration], slots)}
}

// find returns the registration with key, or nil.
func (x *index) find(key uint32) *registration {
	for i := key & x.mask; ; i = (i + 1) & x.mask {
		g := x.slots[i].Load()
		if g == nil {
			return nil
		}
		if g.key == key && g != &tombstone {
			return g
		}
	}
}

// insertLocked adds g, whose key is not in the index.
func (t *Table) insertLocked(g *registration) {
	x := t.idx.Load()
	if 2*(t.live+t.tombs+1) > len(x.slots) {
		x = t.rebuildLocked(t.live + 1)
	}
	for i := g.key & x.mask; ; i = (i + 1) & x.mask {
		s := x.slots[i].Load()
		if s == nil || s == &tombstone {
			if s == &tombstone {
				t.tombs--
			}
			x.slots[i].Store(g)
			t.live++
			return
		}
	}
}

// removeLocked replaces the registration with key by a tombstone, and
// shrinks the index when it is less than 1/16 full.
func (t *Table) removeLocked(key uint32) {
	x := t.idx.Load()
	for i := key & x.mask; ; i = (i + 1) & x.mask {
		s := x.slots[i].Load()
		if s == nil {
			panic("memory: removing a key that is not in the index")
		}
		if s.key == key && s != &tombstone {
			x.slots[i].Store(&tombstone)
			t.tombs++
			t.live--
			if len(x.slots) > minSlots && 16*t.live < len(x.slots) {
				t.rebuildLocked(t.live) // shrink
			}
			return
		}
	}
}

// rebuildLocked publishes a new index without tombstones, sized so that n
// registrations fill at most a quarter of it, and returns it.
func (t *Table) rebuildLocked(n int) *index {
	size := minSlots
	for size < 4*n {
		size *= 2
	}
	old := t.idx.Load()
	x := newIndex(size)
	for i := range old.slots {
		g := old.slots[i].Load()
		if g == nil || g == &tombstone {
			continue
		}
		j := g.key & x.mask
		for x.slots[j].Load() != nil {
			j = (j + 1) & x.mask
		}
		x.slots[j].Store(g)
	}
	t.idx.Store(x)
	t.tombs = 0
	return x
}
