package memory

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// MaxRegions is the most regions a Table holds, and the limit of a Table
// made with NewTable(0). It keeps the key space at most 1/256 full, so a
// random key is almost always free on the first draw.
const MaxRegions = 1 << 24

// Table is the set of memory regions of one device, indexed by key. It is
// safe for concurrent use: Local and Remote take no lock and allocate
// nothing (see index); Register, Deregister and Reregister take the
// Table's mutex.
type Table struct {
	max int
	idx atomic.Pointer[index] // read by lookups without the mutex

	mu    sync.Mutex // guards the fields below and writes to idx
	live  int        // registrations in idx
	tombs int        // tombstones in idx
	keys  keygen
}

// NewTable returns an empty table that holds at most maxRegions regions;
// maxRegions <= 0 or above MaxRegions means MaxRegions.
func NewTable(maxRegions int) *Table {
	if maxRegions <= 0 || maxRegions > MaxRegions {
		maxRegions = MaxRegions
	}
	t := &Table{max: maxRegions, keys: newKeygen()}
	t.idx.Store(newIndex(minSlots))
	return t
}

// Len returns the number of registered regions.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live
}

// Register registers buf in protection domain pd with the rights access
// and returns the region with a new key (see keygen). It fails with
// ErrInvalidAccess if access breaks the rules of ibv_reg_mr (undefined
// flags; REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE) and with
// ErrTooMany if the table is full.
//
// The region's address is the virtual address of buf[0] (0 with
// AccessZeroBased). A zero-length buf may be registered: its address is 0
// and only zero-length ranges at address 0 pass its checks. The caller
// keeps buf alive and in place as long as it is registered; Go's heap
// memory does not move. Registering the same memory twice is allowed.
func (t *Table) Register(pd uint32, buf []byte, access Access) (*Region, error) {
	if err := access.check(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.live >= t.max {
		return nil, fmt.Errorf("%w: %d registered, the table's limit", ErrTooMany, t.live)
	}
	r := &Region{t: t}
	g := t.newRegistrationLocked(r, pd, buf, access)
	r.g.Store(g)
	t.insertLocked(g)
	return r, nil
}

// Deregister ends the registration of r: from its return every lookup of
// the key fails with ErrKey, and so does every check on r or on a view of
// it. The key goes into quarantine (see keygen). r may be the Region
// Register returned or a view of the current registration; deregistering
// twice fails with ErrKey.
//
// Deregister does not wait for copies that passed their check before it:
// such a copy may still reach the buffer after Deregister returns (the
// buffer stays alive, so this is memory safe). Callers that must know no
// copy is under way quiesce the QPs that use the region first.
func (t *Table) Deregister(r *Region) error {
	if r == nil || r.t != t {
		return fmt.Errorf("%w: region not registered in this table", ErrKey)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	g := r.g.Load()
	if !g.valid.Load() {
		if g.invalidated && r == g.handle {
			g.invalidated = false // deregistered now
			return nil
		}
		return g.errInvalid("key")
	}
	t.endLocked(g)
	return nil
}

// Invalidate revokes key in protection domain pd, as LOCAL_INV and SEND
// with invalidate do (IBA 10.6.5, 9.4.1.1): from its return, lookups of the
// key fail with ErrKey. The region stays registered: Deregister still
// releases it, and Reregister makes it valid again under a new key. (rxe
// invalidates only fast-registration MRs; goroce allows any region.)
func (t *Table) Invalidate(pd, key uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	g, err := t.lookup(pd, key, "key")
	if err != nil {
		return err
	}
	t.endLocked(g)
	g.invalidated = true
	return nil
}

// Reregister gives r the buffer buf and the rights access, as ibv_rereg_mr
// does with IBV_REREG_MR_CHANGE_TRANSLATION and CHANGE_ACCESS. A nil buf
// keeps the current buffer; pass r.Access() to keep the rights. The rules
// of Register apply. The protection domain cannot change (to move a region
// to another PD, deregister and register it).
//
// Reregister always assigns a new key, so R_Keys that peers hold for the
// old registration stop working: from its return, lookups of the old key
// fail with ErrKey, as do checks on views of the old registration, and the
// old key goes into quarantine. (rxe's rereg keeps the key; goroce does
// not, so a peer never reaches new memory or rights with an old key.) The
// caller hands out the new key.
//
// r may be the Region Register returned or a view of the current
// registration. Either way the Region Register returned reports the new
// registration afterwards, while views, r included, keep reporting the old
// one. On error nothing changes.
func (t *Table) Reregister(r *Region, buf []byte, access Access) error {
	if r == nil || r.t != t {
		return fmt.Errorf("%w: region not registered in this table", ErrKey)
	}
	if err := access.check(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := r.g.Load()
	revoked := !old.valid.Load() && old.invalidated && r == old.handle
	if !old.valid.Load() && !revoked {
		return old.errInvalid("key")
	}
	if buf == nil {
		buf = old.buf
	}
	h := old.handle
	g := t.newRegistrationLocked(h, old.pd, buf, access)
	t.insertLocked(g)
	if revoked {
		old.invalidated = false
	} else {
		t.endLocked(old)
	}
	h.g.Store(g)
	return nil
}

// Local returns the region with the local key lkey for a work request of
// protection domain pd: a view of the registration (see Region). The key
// must be valid (ErrKey) and belong to pd (ErrPD).
func (t *Table) Local(pd, lkey uint32) (*Region, error) {
	g, err := t.lookup(pd, lkey, "lkey")
	if err != nil {
		return nil, err
	}
	return g.view, nil
}

// Remote returns the region with the remote key rkey for a request that
// arrived on a QP of protection domain pd (IBA 10.6: the R_Key must name a
// region of the QP's PD). Keys and errors are as for Local: L_Key and R_Key
// are the same number.
func (t *Table) Remote(pd, rkey uint32) (*Region, error) {
	g, err := t.lookup(pd, rkey, "rkey")
	if err != nil {
		return nil, err
	}
	return g.view, nil
}

func (t *Table) lookup(pd, key uint32, kind string) (*registration, error) {
	g := t.idx.Load().find(key)
	if g == nil || !g.valid.Load() {
		return nil, fmt.Errorf("%w: %s %#08x", ErrKey, kind, key)
	}
	if g.pd != pd {
		return nil, fmt.Errorf("%w: %s %#08x of PD %d used in PD %d", ErrPD, kind, key, g.pd, pd)
	}
	return g, nil
}

// newRegistrationLocked returns a valid registration of buf for handle
// with a new key, not yet in the index.
func (t *Table) newRegistrationLocked(handle *Region, pd uint32, buf []byte, access Access) *registration {
	x := t.idx.Load()
	g := &registration{
		key:    t.keys.issue(func(k uint32) bool { return x.find(k) != nil }),
		pd:     pd,
		access: access,
		buf:    buf[:len(buf):len(buf)],
		handle: handle,
		view:   &Region{t: t},
	}
	if len(buf) > 0 && access&AccessZeroBased == 0 {
		g.addr = uint64(uintptr(unsafe.Pointer(&buf[0])))
	}
	g.view.g.Store(g)
	g.valid.Store(true)
	return g
}

// endLocked invalidates g, removes its key from the index and quarantines it.
func (t *Table) endLocked(g *registration) {
	g.valid.Store(false)
	t.removeLocked(g.key)
	t.keys.retire(g.key)
}
