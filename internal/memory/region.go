package memory

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Region is a registered memory region: a buffer, the protection domain it
// belongs to, its access rights and the key that names it (IBA 10.6).
//
// The Region that Register returns stands for the memory region for its
// whole life: after Reregister its methods report the new buffer, access
// and key. The Region that Local and Remote return is a view of one
// registration, the one the key named: its methods keep reporting that
// registration, and its checks fail with ErrKey as soon as the registration
// ends (Deregister, or Reregister assigning a new key). So a stale key
// never reaches the memory or rights of a later registration, even when
// Reregister runs between a lookup and its check.
//
// All methods are safe for concurrent use.
type Region struct {
	t *Table
	g atomic.Pointer[registration] // fixed for a view; replaced by Reregister for the Region Register returned
}

// registration is one registration of a region. Only valid is written after
// the registration is published.
type registration struct {
	key    uint32 // L_Key and R_Key
	pd     uint32
	access Access
	addr   uint64 // address of buf[0] as peers see it
	buf    []byte // len == cap
	valid  atomic.Bool
	// remoteWrites counts RDMA WRITE messages placed in this registration,
	// remoteBytes their bytes; waiters > 0 asks NoteRemoteWrite to signal
	// written.
	remoteWrites atomic.Uint64
	remoteBytes  atomic.Uint64
	waiters      atomic.Int32
	written      chan struct{} // capacity 1, made on first wait
	writtenOnce  sync.Once
	// invalidated: the key was revoked by Invalidate, but the region is
	// still registered (Deregister and Reregister accept it).
	invalidated bool
	handle      *Region // the Region Register returned
	view        *Region // the Region lookups return; its g is this registration
}

// LKey returns the local key, used in SGEs.
func (r *Region) LKey() uint32 { return r.g.Load().key }

// RKey returns the remote key, sent to peers for RDMA and atomic
// operations. It equals LKey, as in rxe.
func (r *Region) RKey() uint32 { return r.g.Load().key }

// Addr returns the address of the first byte of the region as peers and
// SGEs name it: the virtual address of the buffer's first byte, as rxe
// advertises it, or 0 when the region was registered with AccessZeroBased.
// A zero-length region has Addr 0.
func (r *Region) Addr() uint64 { return r.g.Load().addr }

// Len returns the length of the region in bytes.
func (r *Region) Len() int { return len(r.g.Load().buf) }

// NoteRemoteWrite records that an RDMA WRITE message of n bytes has been
// placed in the region. The responder calls it after the last byte of the
// message is in memory. The bytes are counted before the message, so that
// a reader that saw the count change finds them counted.
func (r *Region) NoteRemoteWrite(n uint64) {
	g := r.g.Load()
	g.remoteBytes.Add(n)
	g.remoteWrites.Add(1)
	if g.waiters.Load() > 0 {
		select {
		case g.written <- struct{}{}:
		default:
		}
	}
}

// WaitRemoteWrite blocks until RemoteWrites differs from seen, or done is
// closed, and returns the count.
func (r *Region) WaitRemoteWrite(seen uint64, done <-chan struct{}) uint64 {
	g := r.g.Load()
	g.writtenOnce.Do(func() { g.written = make(chan struct{}, 1) })
	g.waiters.Add(1)
	defer g.waiters.Add(-1)
	for {
		if n := g.remoteWrites.Load(); n != seen {
			return n
		}
		select {
		case <-g.written:
		case <-done:
			return g.remoteWrites.Load()
		}
	}
}

// RemoteWrites returns how many RDMA WRITE messages have been placed in the
// region since it was registered (or last reregistered). A program that
// watches memory for a peer's writes waits for this count to change before
// it reads: the count's atomic update orders the read after the bytes of
// every counted message under the Go memory model.
func (r *Region) RemoteWrites() uint64 { return r.g.Load().remoteWrites.Load() }

// RemoteWriteBytes returns how many bytes the messages RemoteWrites counts
// carried. A peer may send one RDMA WRITE work request as several messages
// (a goroce peer over UDP does: transport.Path.SplitWrites), so a program
// that waits for a work request of n bytes waits for this count to grow
// by n; like RemoteWrites, it orders the reads that follow after the bytes.
func (r *Region) RemoteWriteBytes() uint64 { return r.g.Load().remoteBytes.Load() }

// Access returns the access rights the region was registered with.
func (r *Region) Access() Access { return r.g.Load().access }

// PD returns the protection domain the region belongs to.
func (r *Region) PD() uint32 { return r.g.Load().pd }

// Bytes returns the registered buffer (its capacity clipped to its length).
func (r *Region) Bytes() []byte { return r.g.Load().buf }

// Valid reports whether the region's key is still valid: false after
// Deregister, and for a view returned by a lookup, after Reregister.
func (r *Region) Valid() bool { return r.g.Load().valid.Load() }

// CheckRemote returns the length bytes at va for a remote operation that
// needs the rights need (for example AccessRemoteWrite for RDMA WRITE).
// The rules are those of IBA 10.6: the registration must be valid, grant
// need, and [va, va+length) must lie inside [Addr, Addr+Len). A zero-length
// range may sit at Addr+Len. The check is exact for every va and length,
// including ranges that wrap around 2^64. It fails with ErrKey, ErrAccess
// or ErrBounds, checked in that order; like a failed lookup, each is an
// R_Key violation to the responder.
//
// A zero-length RDMA READ or WRITE need not carry a valid R_Key or address
// (IBA C9-88); the transport skips the lookup and check for it, as rxe
// does. This method always checks.
func (r *Region) CheckRemote(va, length uint64, need Access) ([]byte, error) {
	g := r.g.Load()
	if !g.valid.Load() {
		return nil, g.errInvalid("rkey")
	}
	if need&^g.access != 0 {
		return nil, fmt.Errorf("%w: rkey %#08x grants %v, operation needs %v", ErrAccess, g.key, g.access, need)
	}
	return g.bytes(va, length, "rkey")
}

// CheckLocal returns the length bytes at va for a local access by a work
// request: reading is always allowed, writing needs AccessLocalWrite
// (IBA 10.6). Bounds are checked as by CheckRemote; errors are ErrKey,
// ErrAccess or ErrBounds.
func (r *Region) CheckLocal(va, length uint64, write bool) ([]byte, error) {
	return r.g.Load().checkLocal(va, length, write)
}

// CheckAtomic returns the 8 bytes at va for an atomic operation that needs
// the rights need (AccessRemoteAtomic for CMP_SWAP and FETCH_ADD). After
// the checks of CheckRemote it requires an 8-byte aligned target (IBA
// 9.4.5), both va and the memory behind it, else ErrAlign. The result may be
// passed to CompareSwap, FetchAdd and AtomicWrite.
func (r *Region) CheckAtomic(va uint64, need Access) ([]byte, error) {
	b, err := r.CheckRemote(va, 8, need)
	if err != nil {
		return nil, err
	}
	if va&7 != 0 || uintptr(unsafe.Pointer(&b[0]))&7 != 0 {
		return nil, fmt.Errorf("%w: va %#x (memory at %p)", ErrAlign, va, &b[0])
	}
	return b, nil
}

func (g *registration) checkLocal(va, length uint64, write bool) ([]byte, error) {
	if !g.valid.Load() {
		return nil, g.errInvalid("lkey")
	}
	if write && g.access&AccessLocalWrite == 0 {
		return nil, fmt.Errorf("%w: lkey %#08x grants %v, write needs LOCAL_WRITE", ErrAccess, g.key, g.access)
	}
	return g.bytes(va, length, "lkey")
}

// bytes returns the length bytes at va if [va, va+length) lies inside the
// region. It never computes va+length, which may wrap.
func (g *registration) bytes(va, length uint64, kind string) ([]byte, error) {
	n := uint64(len(g.buf))
	off := va - g.addr
	if va < g.addr || off > n || length > n-off {
		return nil, fmt.Errorf("%w: %s %#08x: %#x bytes at %#x, region is %#x bytes at %#x",
			ErrBounds, kind, g.key, length, va, n, g.addr)
	}
	return g.buf[off : off+length : off+length], nil
}

func (g *registration) errInvalid(kind string) error {
	return fmt.Errorf("%w: %s %#08x was deregistered or reregistered", ErrKey, kind, g.key)
}
