package verbs

import (
	"context"
	"fmt"

	"github.com/goroce/goroce/internal/memory"
)

// PD is a protection domain (IBA 10.2.3): memory regions, QPs and SRQs of
// one PD work only with each other.
type PD struct {
	dev *Device
	id  uint32
}

// AllocPD creates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if d.objs.pds >= maxPD {
		return nil, fmt.Errorf("verbs: %s: more than %d protection domains", d.name, maxPD)
	}
	d.objs.pds++
	d.pds++
	return &PD{dev: d, id: d.pds}, nil
}

// Device returns the PD's device.
func (pd *PD) Device() *Device { return pd.dev }

// Dealloc releases the protection domain.
func (pd *PD) Dealloc() error {
	pd.dev.mu.Lock()
	pd.dev.objs.pds--
	pd.dev.mu.Unlock()
	return nil
}

// MR is a memory region: Go memory registered for local and remote access
// (IBA 10.6). Peers address it by the real virtual address of its first
// byte (Addr) and its RKey, as with rxe.
type MR struct {
	pd *PD
	r  *memory.Region
}

// RegMR registers buf with the given access rights. Remote write and
// remote atomic access require local write access (ibv_reg_mr). The
// memory must stay referenced, and should not be moved, while registered:
// Go does not move heap memory.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	r, err := pd.dev.mem.Register(pd.id, buf, access)
	if err != nil {
		return nil, fmt.Errorf("verbs: register %d bytes with %v: %w", len(buf), access, err)
	}
	return &MR{pd: pd, r: r}, nil
}

// LKey returns the local key, used in the SGEs of work requests.
func (mr *MR) LKey() uint32 { return mr.r.LKey() }

// RKey returns the remote key a peer uses in RDMA and atomic requests.
func (mr *MR) RKey() uint32 { return mr.r.RKey() }

// Addr returns the address of the region's first byte, as peers name it.
func (mr *MR) Addr() uint64 { return mr.r.Addr() }

// Len returns the region's length.
func (mr *MR) Len() int { return mr.r.Len() }

// Bytes returns the registered memory.
func (mr *MR) Bytes() []byte { return mr.r.Bytes() }

// RemoteWrites returns how many RDMA WRITE messages from peers have been
// placed in the region since it was registered. A peer's RDMA WRITE raises
// no completion here, so a program that waits for one polls memory, as
// perftest's write latency test does; it must see this count change before
// it reads the bytes, which orders the read after the write under the Go
// memory model (and keeps the race detector quiet). One work request of
// the peer may arrive as several messages: see RemoteWriteBytes.
func (mr *MR) RemoteWrites() uint64 { return mr.r.RemoteWrites() }

// RemoteWriteBytes returns how many bytes the RDMA WRITE messages that
// RemoteWrites counts have placed. A peer may send one RDMA WRITE work
// request as several messages: goroce over UDP sends each packet of an RC
// WRITE as a message of its own (Config.WholeWrites), while rxe sends one.
// A program that waits for a peer's WRITE of n bytes, and reads them, waits
// for this count to grow by n: then every message of it is counted, and
// the reads are ordered after its bytes whatever the peer's framing.
func (mr *MR) RemoteWriteBytes() uint64 { return mr.r.RemoteWriteBytes() }

// WaitRemoteWrites blocks until RemoteWrites differs from seen or ctx ends,
// and returns the count; a poller that has spun long enough sleeps here.
func (mr *MR) WaitRemoteWrites(ctx context.Context, seen uint64) (uint64, error) {
	n := mr.r.WaitRemoteWrite(seen, ctx.Done())
	if n == seen {
		return n, ctx.Err()
	}
	return n, nil
}

// SGE returns a scatter/gather entry covering n bytes from offset off.
func (mr *MR) SGE(off, n int) SGE {
	return SGE{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}
}

// Dereg deregisters the region: its keys stop working at once, for local
// work requests and for peers.
func (mr *MR) Dereg() error {
	if err := mr.pd.dev.mem.Deregister(mr.r); err != nil {
		return fmt.Errorf("verbs: deregister MR lkey 0x%x: %w", mr.r.LKey(), err)
	}
	return nil
}

// Rereg changes the region's memory (nil keeps it) and access rights
// (ibv_rereg_mr). The region gets new keys: the old ones stop working, so
// a peer holding a stale RKey cannot reach the new memory.
func (mr *MR) Rereg(buf []byte, access Access) error {
	if err := mr.pd.dev.mem.Reregister(mr.r, buf, access); err != nil {
		return fmt.Errorf("verbs: reregister MR: %w", err)
	}
	return nil
}
