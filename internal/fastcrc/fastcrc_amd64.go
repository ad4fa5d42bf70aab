//go:build amd64 && !purego

package fastcrc

import "golang.org/x/sys/cpu"

// The vector implementations, fastest first. Each needs VEX-encoded 128-bit
// PCLMULQDQ (AVX, PCLMULQDQ) for its last steps.
const (
	implNone   = iota // hash/crc32 only
	implAVX2          // ieeeAVX2: 256-bit VPCLMULQDQ (AVX2, VPCLMULQDQ)
	implAVX512        // ieeeAVX512: 512-bit VPCLMULQDQ, VPTERNLOGD (AVX512F, AVX512VL, VPCLMULQDQ)
)

// hasAVX512 and hasAVX2 report what the CPU and the OS allow. cpu.X86 only
// reports AVX-512 features when the OS saves the AVX-512 register state, and
// AVX2 when it saves the 256-bit state; x/sys/cpu reports VPCLMULQDQ only
// together with AVX-512, so for the 256-bit code the bit is read from CPUID
// leaf 7 (ECX bit 10) directly.
var (
	hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL &&
		cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ && cpu.X86.HasAVX
	hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && cpu.X86.HasAVX && hasVPCLMULQDQ()
)

func hasVPCLMULQDQ() bool {
	if !cpu.X86.HasAVX2 { // AVX2 implies leaf 7 exists
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<10) != 0
}

// impl is the implementation Update and UpdateCopy use: the fastest the CPU
// has. Tests set it to each one the CPU has in turn.
var impl = bestImpl()

func bestImpl() int {
	switch {
	case hasAVX512:
		return implAVX512
	case hasAVX2:
		return implAVX2
	}
	return implNone
}

// minVectorLen is the shortest input given to the vector code: one 512-bit
// register for ieeeAVX512, two 128-bit lanes for ieeeAVX2. hash/crc32 starts
// folding at 64 bytes, with 128-bit registers (or one 512-bit register from
// 1024 bytes on where the CPU has AVX-512), and below 64 bytes uses
// slicing-by-8; BenchmarkUpdate compares each implementation with it, by
// length.
var minVectorLen = [...]int{implAVX2: 32, implAVX512: 64}

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

// ieeeAVX2 is ieeeAVX512 with 256-bit registers; len(p) must be at least 32
// and a multiple of 16.
//
//go:noescape
func ieeeAVX2(crc uint32, p []byte) uint32

// ieeeCopyAVX2 is ieeeAVX2 that also copies p to dst (len(dst) >= len(p)) in
// the same pass.
//
//go:noescape
func ieeeCopyAVX2(crc uint32, dst, p []byte) uint32

func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)

func archUpdate(crc uint32, p []byte) (uint32, []byte) {
	if impl == implNone || len(p) < minVectorLen[impl] {
		return crc, p
	}
	n := len(p) &^ 15
	if impl == implAVX512 {
		return ^ieeeAVX512(^crc, p[:n]), p[n:]
	}
	return ^ieeeAVX2(^crc, p[:n]), p[n:]
}

func archUpdateCopy(crc uint32, dst, p []byte) (uint32, []byte, []byte) {
	if impl == implNone || len(p) < minVectorLen[impl] {
		return crc, dst, p
	}
	n := len(p) &^ 15
	if impl == implAVX512 {
		return ^ieeeCopyAVX512(^crc, dst[:n], p[:n]), dst[n:], p[n:]
	}
	return ^ieeeCopyAVX2(^crc, dst[:n], p[:n]), dst[n:], p[n:]
}
