// The body of ieeeAVX2 and ieeeCopyAVX2 (fastcrc_amd64.s): the algorithm of
// fastcrc_amd64.h with 256-bit registers, for CPUs that have VPCLMULQDQ but
// not AVX-512 (AMD Zen 3, Intel Alder Lake and later client cores). Each
// includes it with its own definitions of the macros it uses:
//
//	STORE(Y, off)          store the 32 bytes of Y, just loaded from off(SI), to off(DI)
//	FOLDIN(off, Yt, Yp, Y) Y ^= Yp ^ (the 32 bytes at off(SI)), Yt a scratch register
//	FOLDIN16(Xt, Xp, X)    X ^= Xp ^ (the 16 bytes at (SI)), Xt a scratch register
//	ADVANCE($n)            move past n bytes of input (and of output)
//
// On entry AX holds the CRC register, SI the input, CX its length (at least
// 32, a multiple of 16); on exit AX holds the CRC register.
//
// Four 256-bit accumulators Y0..Y3 cover 128 consecutive bytes, two lanes
// each; every iteration folds each over the next 128 bytes (D = 1024 bits).
// After the loop Y0, Y1 and Y2 are folded onto Y3 (D = 768, 512 and 256),
// whole 32-byte blocks into Y3 (D = 256; inputs of 32 to 127 bytes start
// here), its first lane onto its second (D = 128), the remaining 16-byte
// blocks into that lane, and fastcrc_finish_amd64.h reduces the 128 bits.

	// The initial register value is xored into the first 32 bits of the
	// message.
	VMOVD AX, X4 // zeroes the rest of Y4
	CMPQ  CX, $128
	JB    short

	// Load the first 128 bytes into the accumulators.
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	STORE(Y0, 0)
	STORE(Y1, 32)
	STORE(Y2, 64)
	STORE(Y3, 96)
	VPXOR   Y4, Y0, Y0
	ADVANCE($128)
	SUBQ    $128, CX
	CMPQ    CX, $128
	JB      reduce4

	VBROADCASTI128 k1024<>(SB), Y4

	PCALIGN $32
loop128:
	// Yi = Yi.H·x^1056 + Yi.G·x^992 + next 32 bytes, for each i.
	VPCLMULQDQ $0x00, Y4, Y0, Y5
	VPCLMULQDQ $0x00, Y4, Y1, Y6
	VPCLMULQDQ $0x00, Y4, Y2, Y7
	VPCLMULQDQ $0x00, Y4, Y3, Y8
	VPCLMULQDQ $0x11, Y4, Y0, Y0
	VPCLMULQDQ $0x11, Y4, Y1, Y1
	VPCLMULQDQ $0x11, Y4, Y2, Y2
	VPCLMULQDQ $0x11, Y4, Y3, Y3
	FOLDIN(0, Y11, Y5, Y0)
	FOLDIN(32, Y12, Y6, Y1)
	FOLDIN(64, Y13, Y7, Y2)
	FOLDIN(96, Y14, Y8, Y3)
	ADVANCE($128)
	SUBQ       $128, CX
	CMPQ       CX, $128
	JAE        loop128

reduce4:
	// Fold Y0, Y1 and Y2 onto Y3 (768, 512 and 256 bits further on).
	VBROADCASTI128 k768<>(SB), Y4
	VBROADCASTI128 k512<>(SB), Y9
	VBROADCASTI128 k256<>(SB), Y10
	VPCLMULQDQ     $0x00, Y4, Y0, Y5
	VPCLMULQDQ     $0x11, Y4, Y0, Y0
	VPCLMULQDQ     $0x00, Y9, Y1, Y6
	VPCLMULQDQ     $0x11, Y9, Y1, Y1
	VPCLMULQDQ     $0x00, Y10, Y2, Y7
	VPCLMULQDQ     $0x11, Y10, Y2, Y2
	VPXOR          Y5, Y0, Y0
	VPXOR          Y6, Y1, Y1
	VPXOR          Y7, Y2, Y2
	VPXOR          Y0, Y1, Y1
	VPXOR          Y2, Y3, Y3
	VPXOR          Y1, Y3, Y3

	// Fewer than 128 bytes are left: fold 32 bytes at a time into Y3.
tail32:
	CMPQ CX, $32
	JB   reduce1

loop32:
	VPCLMULQDQ $0x00, Y10, Y3, Y5
	VPCLMULQDQ $0x11, Y10, Y3, Y3
	FOLDIN(0, Y11, Y5, Y3)
	ADVANCE($32)
	SUBQ       $32, CX
	CMPQ       CX, $32
	JAE        loop32

	JMP reduce1

short:
	// 32 <= len(p) < 128: start with the first 32 bytes in Y3 alone.
	VMOVDQU        (SI), Y3
	STORE(Y3, 0)
	VPXOR          Y4, Y3, Y3
	ADVANCE($32)
	SUBQ           $32, CX
	VBROADCASTI128 k256<>(SB), Y10
	JMP            tail32

reduce1:
	// Fold lane 0 of Y3 onto lane 1, giving X3 (the VEX-encoded 128-bit
	// instructions clear the upper lanes).
	VMOVDQU      k128<>(SB), X4
	VEXTRACTI128 $1, Y3, X6
	VPCLMULQDQ   $0x00, X4, X3, X5
	VPCLMULQDQ   $0x11, X4, X3, X3
	VPXOR        X5, X3, X3
	VPXOR        X6, X3, X3

	// Fewer than 32 bytes are left: fold 16 bytes at a time into X3.
	CMPQ CX, $16
	JB   finish

loop16:
	VPCLMULQDQ $0x00, X4, X3, X5
	VPCLMULQDQ $0x11, X4, X3, X3
	FOLDIN16(X11, X5, X3)
	ADVANCE($16)
	SUBQ       $16, CX
	CMPQ       CX, $16
	JAE        loop16

#include "fastcrc_finish_amd64.h"
