//go:build !amd64 || purego

package fastcrc

// archUpdate has nothing faster than hash/crc32 to offer here: it consumes no
// bytes.
func archUpdate(crc uint32, p []byte) (uint32, []byte) {
	return crc, p
}

// archUpdateCopy consumes no bytes either.
func archUpdateCopy(crc uint32, dst, p []byte) (uint32, []byte, []byte) {
	return crc, dst, p
}
