// Package memory holds registered memory regions (IBA 10.6): key generation,
// lookup, access and bounds checks, scatter/gather copies and 8-byte atomics
// on registered memory.
//
// A Table is the set of regions of one device. Register adds a region and
// names it by a key (the L_Key and R_Key, equal as in rxe); the transport
// finds it again by key with Local or Remote and asks the Region for the
// exact bytes an operation may touch with CheckLocal, CheckRemote or
// CheckAtomic. Gather and Scatter copy between a packet and a work
// request's scatter/gather list. A check that fails touches no memory.
//
// Lookups and checks take no lock and allocate nothing; only their errors
// allocate. Register, Deregister and Reregister are serialized by the
// Table's mutex.
package memory

import "errors"

// Errors of lookups, checks and registration. Errors returned by this
// package wrap one of them with the key, address or rule involved; test
// with errors.Is.
var (
	// ErrKey: no valid region has the key (never issued, deregistered, or
	// replaced by Reregister).
	ErrKey = errors.New("memory: invalid key")
	// ErrPD: the key names a region of another protection domain.
	ErrPD = errors.New("memory: key belongs to another protection domain")
	// ErrBounds: the range is not inside the region.
	ErrBounds = errors.New("memory: range outside the region")
	// ErrAccess: the region does not grant the access the operation needs.
	ErrAccess = errors.New("memory: access not granted by the region")
	// ErrAlign: the target of an atomic operation is not 8-byte aligned.
	ErrAlign = errors.New("memory: atomic target not 8-byte aligned")
	// ErrTooMany: the table holds its maximum number of regions.
	ErrTooMany = errors.New("memory: too many regions")
	// ErrInvalidAccess: the access flags cannot be registered.
	ErrInvalidAccess = errors.New("memory: invalid access flags")
	// ErrLength: the scatter/gather list is shorter than the requested range.
	ErrLength = errors.New("memory: scatter/gather list shorter than the range")
)
