//go:build amd64 && !purego

#include "textflag.h"

// CRC-32 of IEEE 802.3 by carry-less multiplication, after the folding idea
// of Intel's white paper "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ Instruction" (Gopal et al., 2009), with four 512-bit accumulators.
//
// Notation. P(x) = x^32 + 0x04C11DB7 (in normal bit order) is the generator.
// The message is a polynomial M(x) whose first bit (bit 0 of the first byte,
// the CRC is "reflected") is its highest coefficient; the CRC register holds
// M(x)·x^32 mod P(x), the initial register value being xored into the first 32
// bits of the message. A 16-byte lane loaded from memory is then, read as a
// little-endian 128-bit integer L, the polynomial A(x) = Σ L[i]·x^(127-i) of
// its 128 bits, counted so that its last bit has degree 0: bit i of L holds
// the coefficient of x^(127-i). We write L = rev128(A). The low qword of the
// lane holds the high half H of A, the high qword the low half G:
// A = H·x^64 + G, low qword = rev64(H), high qword = rev64(G).
//
// Carry-less multiplication of two reflected qwords yields a reflected
// product shifted by one bit: clmul(rev64(H), rev64(Q)) = rev128(H·Q·x).
//
// Folding. Lane A lies D bits before lane B (the end of A is D bits before the
// end of B) in the message. Modulo P, A contributes A·x^D to B's position, so
// B can be replaced by
//	B + H·(x^(D+64) mod P) + G·(x^D mod P)
// which again fits in 128 bits. Each constant K(x) = x^n mod P has degree < 32
// and is stored as the 33-bit value rev32(K)<<1 = rev64(K·x^31); then
//	clmul(rev64(H), rev64(K·x^31)) = rev128(H·K·x^32)
// so the constant for H is x^(D+64-32) mod P and the one for G is
// x^(D-32) mod P. A fold constant pair "kD" is the 128-bit value whose low
// qword is rev32(x^(D+32) mod P)<<1 (multiplied with the low qword, H, of a
// lane by VPCLMULQDQ $0x00) and whose high qword is rev32(x^(D-32) mod P)<<1
// (multiplied with the high qword, G, by VPCLMULQDQ $0x11). In a 512-bit
// register the pair is repeated in all four lanes. Our k512 and k128 equal
// the r2r1 and r4r3 of hash/crc32 (which come from the Linux kernel).
//
// The main loop keeps four 512-bit accumulators Z0..Z3 for 256 consecutive
// bytes: lane j of Zi covers bytes 64i+16j .. 64i+16j+15 of the last 256
// bytes. Each iteration folds every accumulator over the next 256 bytes,
// D = 2048 bits, with constants x^2080 and x^2016 mod P. The four
// multiply-xor chains are independent, so their latencies overlap (hash/crc32
// folds with one 512-bit register, 64 bytes per multiply latency). After the
// loop Z0, Z1 and Z2 are folded onto Z3 (D = 1536, 1024, 512), fewer than 256
// bytes remain: whole 64-byte blocks are folded into Z3 (D = 512; inputs of
// 64 to 255 bytes start here), its four lanes onto the last one (D = 384,
// 256, 128), the remaining 16-byte blocks into that lane (D = 128), and the
// 128 bits are reduced to the 32-bit remainder as hash/crc32 does.
//
// fastcrc_test.go recomputes every constant below in pure Go (TestConstants)
// and checks a pure-Go model of this algorithm against hash/crc32.

// Fold constant pairs, one 128-bit pair each, broadcast to every lane of a
// register (k768 and k256 serve only the 256-bit code of fastcrc_avx2_amd64.h).
DATA k2048<>+0(SB)/8, $0x11542778a // rev32(x^2080 mod P)<<1
DATA k2048<>+8(SB)/8, $0x1322d1430 // rev32(x^2016 mod P)<<1
GLOBL k2048<>(SB), RODATA, $16

DATA k1536<>+0(SB)/8, $0x1821d8bc0 // rev32(x^1568 mod P)<<1
DATA k1536<>+8(SB)/8, $0x12e958ac4 // rev32(x^1504 mod P)<<1
GLOBL k1536<>(SB), RODATA, $16

DATA k1024<>+0(SB)/8, $0x1e88ef372 // rev32(x^1056 mod P)<<1
DATA k1024<>+8(SB)/8, $0x14a7fe880 // rev32(x^992 mod P)<<1
GLOBL k1024<>(SB), RODATA, $16

DATA k768<>+0(SB)/8, $0x0df068dc2 // rev32(x^800 mod P)<<1
DATA k768<>+8(SB)/8, $0x18cb44e58 // rev32(x^736 mod P)<<1
GLOBL k768<>(SB), RODATA, $16

DATA k512<>+0(SB)/8, $0x154442bd4 // rev32(x^544 mod P)<<1
DATA k512<>+8(SB)/8, $0x1c6e41596 // rev32(x^480 mod P)<<1
GLOBL k512<>(SB), RODATA, $16

DATA k256<>+0(SB)/8, $0x0f1da05aa // rev32(x^288 mod P)<<1
DATA k256<>+8(SB)/8, $0x15a546366 // rev32(x^224 mod P)<<1
GLOBL k256<>(SB), RODATA, $16

// klanes folds lanes 0, 1 and 2 of a 512-bit register onto lane 3, that is
// over 384, 256 and 128 bits; lane 3 is multiplied by zero.
DATA klanes<>+0(SB)/8, $0x03db1ecdc  // rev32(x^416 mod P)<<1
DATA klanes<>+8(SB)/8, $0x174359406  // rev32(x^352 mod P)<<1
DATA klanes<>+16(SB)/8, $0x0f1da05aa // rev32(x^288 mod P)<<1
DATA klanes<>+24(SB)/8, $0x15a546366 // rev32(x^224 mod P)<<1
DATA klanes<>+32(SB)/8, $0x1751997d0 // rev32(x^160 mod P)<<1
DATA klanes<>+40(SB)/8, $0x0ccaa009e // rev32(x^96 mod P)<<1
DATA klanes<>+48(SB)/8, $0
DATA klanes<>+56(SB)/8, $0
GLOBL klanes<>(SB), RODATA, $64

// k128 folds one 128-bit lane onto the next; its high qword also serves the
// final 128 -> 96 bit step.
DATA k128<>+0(SB)/8, $0x1751997d0 // rev32(x^160 mod P)<<1
DATA k128<>+8(SB)/8, $0x0ccaa009e // rev32(x^96 mod P)<<1
GLOBL k128<>(SB), RODATA, $16

// k64 serves the 96 -> 64 bit step.
DATA k64<>+0(SB)/8, $0x163cd6124 // rev32(x^64 mod P)<<1
DATA k64<>+8(SB)/8, $0
GLOBL k64<>(SB), RODATA, $16

// Barrett reduction of 64 bits to the 32-bit remainder: the generator and
// mu = floor(x^64 / P), both of degree 32, as rev33 (33-bit reversal).
DATA kbarrett<>+0(SB)/8, $0x1db710641 // rev33(P), P = 0x104c11db7
DATA kbarrett<>+8(SB)/8, $0x1f7011641 // rev33(mu), mu = 0x104d101df
GLOBL kbarrett<>(SB), RODATA, $16

DATA mask32<>+0(SB)/8, $0xffffffff
DATA mask32<>+8(SB)/8, $0
GLOBL mask32<>(SB), RODATA, $16

// func ieeeAVX512(crc uint32, p []byte) uint32
//
// crc and the result are the CRC register (the inverted CRC-32). len(p) must
// be at least 64 and a multiple of 16.
TEXT ·ieeeAVX512(SB), NOSPLIT, $0-36
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX

#define STORE(z, off)
#define FOLDIN(off, zt, zp, z) VPTERNLOGD $0x96, off(SI), zp, z
#define FOLDIN16(xt, xp, x) VPTERNLOGD $0x96, (SI), xp, x
#define ADVANCE(n) ADDQ n, SI
#include "fastcrc_amd64.h"
#undef STORE
#undef FOLDIN
#undef FOLDIN16
#undef ADVANCE

	VZEROUPPER
	MOVL AX, ret+32(FP)
	RET

// func ieeeCopyAVX512(crc uint32, dst, p []byte) uint32
//
// ieeeAVX512 that also copies p to dst, each block stored as it is loaded
// for the CRC: one pass over the data instead of two. len(dst) must be at
// least len(p).
TEXT ·ieeeCopyAVX512(SB), NOSPLIT, $0-60
	MOVL crc+0(FP), AX
	MOVQ dst_base+8(FP), DI
	MOVQ p_base+32(FP), SI
	MOVQ p_len+40(FP), CX

#define STORE(z, off) VMOVDQU64 z, off(DI)
#define FOLDIN(off, zt, zp, z) VMOVDQU64 off(SI), zt; VMOVDQU64 zt, off(DI); VPTERNLOGD $0x96, zt, zp, z
#define FOLDIN16(xt, xp, x) VMOVDQU (SI), xt; VMOVDQU xt, (DI); VPTERNLOGD $0x96, xt, xp, x
#define ADVANCE(n) ADDQ n, SI; ADDQ n, DI
#include "fastcrc_amd64.h"
#undef STORE
#undef FOLDIN
#undef FOLDIN16
#undef ADVANCE

	VZEROUPPER
	MOVL AX, ret+56(FP)
	RET

// func ieeeAVX2(crc uint32, p []byte) uint32
//
// ieeeAVX512 with 256-bit registers and VEX encodings only (AVX2,
// VPCLMULQDQ). len(p) must be at least 32 and a multiple of 16.
TEXT ·ieeeAVX2(SB), NOSPLIT, $0-36
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX

#define STORE(y, off)
#define FOLDIN(off, yt, yp, y) VPXOR off(SI), yp, yp; VPXOR yp, y, y
#define FOLDIN16(xt, xp, x) VPXOR (SI), xp, xp; VPXOR xp, x, x
#define ADVANCE(n) ADDQ n, SI
#include "fastcrc_avx2_amd64.h"
#undef STORE
#undef FOLDIN
#undef FOLDIN16
#undef ADVANCE

	VZEROUPPER
	MOVL AX, ret+32(FP)
	RET

// func ieeeCopyAVX2(crc uint32, dst, p []byte) uint32
//
// ieeeAVX2 that also copies p to dst in the same pass, as ieeeCopyAVX512
// does. len(dst) must be at least len(p).
TEXT ·ieeeCopyAVX2(SB), NOSPLIT, $0-60
	MOVL crc+0(FP), AX
	MOVQ dst_base+8(FP), DI
	MOVQ p_base+32(FP), SI
	MOVQ p_len+40(FP), CX

#define STORE(y, off) VMOVDQU y, off(DI)
#define FOLDIN(off, yt, yp, y) VMOVDQU off(SI), yt; VMOVDQU yt, off(DI); VPXOR yt, yp, yp; VPXOR yp, y, y
#define FOLDIN16(xt, xp, x) VMOVDQU (SI), xt; VMOVDQU xt, (DI); VPXOR xt, xp, xp; VPXOR xp, x, x
#define ADVANCE(n) ADDQ n, SI; ADDQ n, DI
#include "fastcrc_avx2_amd64.h"
#undef STORE
#undef FOLDIN
#undef FOLDIN16
#undef ADVANCE

	VZEROUPPER
	MOVL AX, ret+56(FP)
	RET

// func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL subleaf+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET
