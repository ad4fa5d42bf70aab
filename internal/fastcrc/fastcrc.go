// Package fastcrc computes the CRC-32 of IEEE 802.3 (hash/crc32's IEEE),
// faster than hash/crc32 on amd64 CPUs with AVX-512 and VPCLMULQDQ.
package fastcrc

import "hash/crc32"

// Update returns the result of adding the bytes in p to the crc; it equals
// crc32.Update(crc, crc32.IEEETable, p) for every crc and p.
func Update(crc uint32, p []byte) uint32 {
	// archUpdate consumes the prefix of p that the architecture-specific code
	// handles faster than hash/crc32 (possibly nothing) and returns the CRC of
	// that prefix together with the bytes still to be added.
	crc, p = archUpdate(crc, p)
	if len(p) == 0 {
		return crc
	}
	return genericUpdate(crc, p)
}

// UpdateCopy copies p into dst, as copy(dst, p) does, and returns
// Update(crc, p), reading p once where the CPU has the vector code: a packet
// that must be both copied and checksummed costs about what the checksum
// alone does. dst must be at least as long as p; it may not overlap p.
func UpdateCopy(crc uint32, dst, p []byte) uint32 {
	if len(dst) < len(p) {
		panic("fastcrc: UpdateCopy: dst shorter than p")
	}
	crc, dst, p = archUpdateCopy(crc, dst, p)
	if len(p) == 0 {
		return crc
	}
	copy(dst, p)
	return genericUpdate(crc, p)
}

// genericUpdate is the fallback, used for short inputs, for the tail that the
// vector code leaves, and on CPUs (or builds) without the vector code.
func genericUpdate(crc uint32, p []byte) uint32 {
	return crc32.Update(crc, crc32.IEEETable, p)
}
