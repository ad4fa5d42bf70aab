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

// genericUpdate is the fallback, used for short inputs, for the tail that the
// vector code leaves, and on CPUs (or builds) without the vector code.
func genericUpdate(crc uint32, p []byte) uint32 {
	return crc32.Update(crc, crc32.IEEETable, p)
}
