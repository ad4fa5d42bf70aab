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

// impl, impls and implNames mirror fastcrc_amd64.go for the tests: the only
// implementation here is hash/crc32's.
const implNone = 0

var impl = implNone

func impls() []int { return []int{implNone} }

var implNames = [...]string{implNone: "stdlib"}
