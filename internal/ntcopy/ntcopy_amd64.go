//go:build amd64 && !purego

package ntcopy

// copyNT copies n bytes, a positive multiple of 64, from src to dst (64-byte
// aligned) with MOVNTDQ stores and ends with SFENCE.
//
//go:noescape
func copyNT(dst, src *byte, n int)

// copyBlocks copies the whole 64-byte blocks of dst (64-byte aligned) from
// src with non-temporal stores and returns their length.
func copyBlocks(dst, src []byte) int {
	n := len(dst) &^ (block - 1)
	if n > 0 {
		copyNT(&dst[0], &src[0], n)
	}
	return n
}
