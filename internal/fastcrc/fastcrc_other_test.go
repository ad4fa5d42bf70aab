//go:build !amd64 || purego

package fastcrc

// impl, impls and implNames mirror fastcrc_amd64.go and
// fastcrc_amd64_test.go: the only implementation here is hash/crc32's.
const implNone = 0

var impl = implNone

func impls() []int { return []int{implNone} }

var implNames = [...]string{implNone: "stdlib"}
