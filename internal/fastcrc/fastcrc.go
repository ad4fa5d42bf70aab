// Package fastcrc computes the CRC-32 of IEEE 802.3 (hash/crc32's IEEE),
// faster than hash/crc32 on amd64 CPUs with VPCLMULQDQ, with AVX-512 or with
// AVX2 alone, and for short inputs everywhere.
package fastcrc

import (
	"encoding/binary"
	"hash/crc32"
)

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

// UpdateShort is Update for short inputs, such as packet headers put
// together in an array on the caller's stack: unlike Update it never lets p
// escape to the heap (hash/crc32, which Update falls back to for long inputs
// on CPUs without the vector code, keeps a reference to its slice). Where the
// CPU has no vector code it goes eight bytes a step (slicing-by-8), so it is
// meant for inputs of a few dozen bytes.
func UpdateShort(crc uint32, p []byte) uint32 {
	crc, p = archUpdate(crc, p)
	return slicingUpdate(crc, p)
}

// genericUpdate is the fallback, used for short inputs, for the tail that the
// vector code leaves (fewer than 16 bytes), and on CPUs (or builds) without
// the vector code. Below 64 bytes hash/crc32 itself goes byte by byte (below
// 16) or by slicing-by-8, behind a dispatch that costs as much as the work,
// so slicingUpdate takes those inputs itself.
// Chosen by measurement: docs/design/tuning.md#short-crc.
func genericUpdate(crc uint32, p []byte) uint32 {
	if len(p) < 64 {
		return slicingUpdate(crc, p)
	}
	return crc32.Update(crc, crc32.IEEETable, p)
}

// slicing8 holds the tables of slicing-by-8 (Kounavis and Berry, Intel,
// 2005) for the reflected IEEE polynomial: slicing8[0] is hash/crc32's
// IEEETable, slicing8[k][b] the register's change for byte b followed by k
// zero bytes.
var slicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		for k := 1; k < 8; k++ {
			v := t[k-1][i]
			t[k][i] = v>>8 ^ t[0][v&0xff]
		}
	}
	return t
}()

// slicingUpdate is Update by slicing-by-8, eight bytes a step, then four
// (slicing-by-4 with the same tables' first four), then one.
func slicingUpdate(crc uint32, p []byte) uint32 {
	r := ^crc
	for len(p) >= 8 {
		r ^= binary.LittleEndian.Uint32(p)
		r = slicing8[7][r&0xff] ^ slicing8[6][r>>8&0xff] ^ slicing8[5][r>>16&0xff] ^ slicing8[4][r>>24] ^
			slicing8[3][p[4]] ^ slicing8[2][p[5]] ^ slicing8[1][p[6]] ^ slicing8[0][p[7]]
		p = p[8:]
	}
	if len(p) >= 4 { // slicing-by-4 once: a 12-byte BTH costs half as much as byte by byte
		r ^= binary.LittleEndian.Uint32(p)
		r = slicing8[3][r&0xff] ^ slicing8[2][r>>8&0xff] ^ slicing8[1][r>>16&0xff] ^ slicing8[0][r>>24]
		p = p[4:]
	}
	for _, b := range p {
		r = slicing8[0][byte(r)^b] ^ r>>8
	}
	return ^r
}
