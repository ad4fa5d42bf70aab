//go:build amd64 && !purego

package fastcrc

import "golang.org/x/sys/cpu"

// useAVX512 reports whether ieeeAVX512 may run: it uses 512-bit VPCLMULQDQ and
// VPTERNLOGD (AVX512F, VPCLMULQDQ), EVEX-encoded 128/256-bit instructions
// (AVX512VL) and VEX-encoded 128-bit PCLMULQDQ (AVX, PCLMULQDQ). cpu.X86 only
// reports AVX-512 features when the OS saves the AVX-512 register state.
var useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL &&
	cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ && cpu.X86.HasAVX

// minAVX512Len is the shortest input given to ieeeAVX512, the shortest it
// can take: one 512-bit register. hash/crc32 also starts folding at 64 bytes,
// with 128-bit registers (or one 512-bit register from 1024 bytes on), and
// below 64 bytes both use hash/crc32's slicing-by-8 code. From 64 bytes on
// ieeeAVX512 is at least as fast as hash/crc32, from 256 bytes (where its four
// 512-bit accumulators start) more than twice as fast (see BenchmarkUpdate).
const minAVX512Len = 64

// ieeeAVX512 returns the CRC of p with initial value crc, both in the inverted
// form that the CRC register holds (crc32's value xor 0xffffffff). len(p) must
// be at least 64 and a multiple of 16. It is written in fastcrc_amd64.s.
//
//go:noescape
func ieeeAVX512(crc uint32, p []byte) uint32

// ieeeCopyAVX512 is ieeeAVX512 that also copies p to dst (len(dst) >=
// len(p)) in the same pass.
//
//go:noescape
func ieeeCopyAVX512(crc uint32, dst, p []byte) uint32

func archUpdate(crc uint32, p []byte) (uint32, []byte) {
	if !useAVX512 || len(p) < minAVX512Len {
		return crc, p
	}
	n := len(p) &^ 15
	return ^ieeeAVX512(^crc, p[:n]), p[n:]
}

func archUpdateCopy(crc uint32, dst, p []byte) (uint32, []byte, []byte) {
	if !useAVX512 || len(p) < minAVX512Len {
		return crc, dst, p
	}
	n := len(p) &^ 15
	return ^ieeeCopyAVX512(^crc, dst[:n], p[:n]), dst[n:], p[n:]
}
