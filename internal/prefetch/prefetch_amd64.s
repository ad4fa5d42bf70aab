//go:build !purego

#include "textflag.h"

// func prefetchW(p unsafe.Pointer, lines int)
TEXT ·prefetchW(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ lines+8(FP), CX
	TESTQ CX, CX
	JLE done
loop:
	// PREFETCHW (AX), which the Go assembler does not know by name.
	BYTE $0x0f; BYTE $0x0d; BYTE $0x08
	ADDQ $64, AX
	DECQ CX
	JNZ loop
done:
	RET

// func prefetchT0(p unsafe.Pointer, lines int)
TEXT ·prefetchT0(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ lines+8(FP), CX
	TESTQ CX, CX
	JLE done
loop:
	PREFETCHT0 (AX)
	ADDQ $64, AX
	DECQ CX
	JNZ loop
done:
	RET

// func hasPrefetchW() bool
TEXT ·hasPrefetchW(SB), NOSPLIT, $0-1
	MOVL $0x80000000, AX
	CPUID
	CMPL AX, $0x80000001
	JB no
	MOVL $0x80000001, AX
	XORL CX, CX
	CPUID
	SHRL $8, CX // PRFCHW (3DNowPrefetch)
	ANDL $1, CX
	MOVB CX, ret+0(FP)
	RET
no:
	MOVB $0, ret+0(FP)
	RET
