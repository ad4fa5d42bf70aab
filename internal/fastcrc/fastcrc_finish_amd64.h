// The last steps of every vector body (fastcrc_amd64.h, fastcrc_avx2_amd64.h):
// the 128 bits in X3, k128 in X4, reduced to the CRC register in AX. Uses
// only 128-bit VEX instructions (AVX and PCLMULQDQ).

finish:
	// X3 = rev128(A), A = H·x^64 + G, the last 128 bits of the message, all
	// earlier bits folded into it: the CRC register is A·x^32 mod P.
	//
	// 128 -> 96 bits: X3 = rev128(H·(x^96 mod P)·x^32 + G·x^64), which is
	// ≡ A·x^64 and divisible by x^32: it is T·x^32 with T ≡ A·x^32, of
	// degree < 96, in bits 0..95.
	VPCLMULQDQ $0x10, X4, X3, X5          // X3.lo · k128.hi (x^96)
	VPSRLDQ    $8, X3, X3
	VPXOR      X5, X3, X3

	// 96 -> 64 bits: T = U·x^64 + V, U the 32 bits in bits 0..31. Then
	// X3 = rev128((U·(x^64 mod P) + V)·x^64) and W = U·(x^64 mod P) + V,
	// ≡ T, of degree < 64, is in bits 0..63.
	VMOVDQU    mask32<>(SB), X7
	VPSRLDQ    $4, X3, X6                 // rev128(V·x^64)
	VPAND      X7, X3, X5                 // U
	VPCLMULQDQ $0x00, k64<>(SB), X5, X5
	VPXOR      X6, X5, X3

	// Barrett reduction, 64 -> 32 bits: W = Wh·x^32 + Wl, Wh in bits 0..31.
	// q = floor(Wh·mu / x^32) is the quotient of W by P, and
	// W mod P = W + q·P, whose top 32 bits cancel; the remainder ends up in
	// bits 32..63.
	VMOVDQU    kbarrett<>(SB), X4
	VPAND      X7, X3, X5                 // Wh
	VPCLMULQDQ $0x10, X4, X5, X5          // Wh · mu
	VPAND      X7, X5, X5                 // q
	VPCLMULQDQ $0x00, X4, X5, X5          // q · P
	VPXOR      X5, X3, X3
	VPEXTRD    $1, X3, AX

