// The body of ieeeAVX512 and ieeeCopyAVX512 (fastcrc_amd64.s), which
// include it with their own definitions of the macros it uses:
//
//	STORE(Z, off)          store the 64 bytes of Z, just loaded from off(SI), to off(DI)
//	FOLDIN(off, Zt, Zp, Z) Z ^= Zp ^ (the 64 bytes at off(SI)), Zt a scratch register
//	FOLDIN16(Xt, Xp, X)    X ^= Xp ^ (the 16 bytes at (SI)), Xt a scratch register
//	ADVANCE($n)            move past n bytes of input (and of output)
//
// On entry AX holds the CRC register, SI the input, CX its length (at least
// 64, a multiple of 16); on exit AX holds the CRC register.

	// The initial register value is xored into the first 32 bits of the
	// message.
	VMOVD AX, X4 // zeroes the rest of Z4
	CMPQ  CX, $256
	JB    short

	// Load the first 256 bytes into the accumulators.
	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	STORE(Z0, 0)
	STORE(Z1, 64)
	STORE(Z2, 128)
	STORE(Z3, 192)
	VPXORQ    Z4, Z0, Z0
	ADVANCE($256)
	SUBQ      $256, CX
	CMPQ      CX, $256
	JB        reduce4

	VBROADCASTI32X4 k2048<>(SB), Z4

	PCALIGN $32
loop256:
	// Zi = Zi.H·x^2080 + Zi.G·x^2016 + next 64 bytes, for each i.
	VPCLMULQDQ $0x00, Z4, Z0, Z5
	VPCLMULQDQ $0x00, Z4, Z1, Z6
	VPCLMULQDQ $0x00, Z4, Z2, Z7
	VPCLMULQDQ $0x00, Z4, Z3, Z8
	VPCLMULQDQ $0x11, Z4, Z0, Z0
	VPCLMULQDQ $0x11, Z4, Z1, Z1
	VPCLMULQDQ $0x11, Z4, Z2, Z2
	VPCLMULQDQ $0x11, Z4, Z3, Z3
	FOLDIN(0, Z11, Z5, Z0)                // three-way xor with the next 64 bytes
	FOLDIN(64, Z12, Z6, Z1)
	FOLDIN(128, Z13, Z7, Z2)
	FOLDIN(192, Z14, Z8, Z3)
	ADVANCE($256)
	SUBQ       $256, CX
	CMPQ       CX, $256
	JAE        loop256

reduce4:
	// Fold Z0, Z1 and Z2 onto Z3 (1536, 1024 and 512 bits further on).
	VBROADCASTI32X4 k1536<>(SB), Z4
	VBROADCASTI32X4 k1024<>(SB), Z9
	VBROADCASTI32X4 k512<>(SB), Z10
	VPCLMULQDQ      $0x00, Z4, Z0, Z5
	VPCLMULQDQ      $0x11, Z4, Z0, Z0
	VPCLMULQDQ      $0x00, Z9, Z1, Z6
	VPCLMULQDQ      $0x11, Z9, Z1, Z1
	VPCLMULQDQ      $0x00, Z10, Z2, Z7
	VPCLMULQDQ      $0x11, Z10, Z2, Z2
	VPTERNLOGD      $0x96, Z5, Z0, Z6     // Z6 = Z5 ^ Z0 ^ Z6
	VPTERNLOGD      $0x96, Z7, Z2, Z1     // Z1 = Z7 ^ Z2 ^ Z1
	VPTERNLOGD      $0x96, Z6, Z1, Z3     // Z3 ^= Z6 ^ Z1

	// Fewer than 256 bytes are left: fold 64 bytes at a time into Z3.
tail64:
	CMPQ CX, $64
	JB   reduce1

loop64:
	VPCLMULQDQ $0x00, Z10, Z3, Z5
	VPCLMULQDQ $0x11, Z10, Z3, Z3
	FOLDIN(0, Z11, Z5, Z3)
	ADVANCE($64)
	SUBQ       $64, CX
	CMPQ       CX, $64
	JAE        loop64

	JMP reduce1

short:
	// 64 <= len(p) < 256: start with the first 64 bytes in Z3 alone.
	VMOVDQU64       (SI), Z3
	STORE(Z3, 0)
	VPXORQ          Z4, Z3, Z3
	ADVANCE($64)
	SUBQ            $64, CX
	VBROADCASTI32X4 k512<>(SB), Z10
	JMP             tail64

reduce1:
	// Fold lanes 0, 1 and 2 of Z3 onto lane 3, giving X3.
	VMOVDQU64      klanes<>(SB), Z4
	VPCLMULQDQ     $0x00, Z4, Z3, Z5
	VPCLMULQDQ     $0x11, Z4, Z3, Z6
	VEXTRACTI32X4  $3, Z3, X3
	VPXORQ         Z5, Z6, Z5             // lane 3 of Z5 is zero
	VEXTRACTI64X4  $1, Z5, Y6
	VPXORQ         Y6, Y5, Y5
	VEXTRACTI32X4  $1, Y5, X6
	VPTERNLOGD     $0x96, X6, X5, X3

	// Fewer than 64 bytes are left: fold 16 bytes at a time into X3.
	VMOVDQU k128<>(SB), X4
	CMPQ    CX, $16
	JB      finish

loop16:
	VPCLMULQDQ $0x00, X4, X3, X5
	VPCLMULQDQ $0x11, X4, X3, X3
	FOLDIN16(X11, X5, X3)
	ADVANCE($16)
	SUBQ       $16, CX
	CMPQ       CX, $16
	JAE        loop16

#include "fastcrc_finish_amd64.h"
