#include "textflag.h"

// func widenHalf8(dst *float32, src *uint16, n int)
// n is a positive multiple of 8.
TEXT ·widenHalf8(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	TESTQ $1, CX
	JZ   wpairs
	VCVTPH2PS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
wpairs:
	SHRQ $1, CX
	JZ   wdone
wloop:
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  wloop
wdone:
	VZEROUPPER
	RET

// func narrowHalf8(dst *uint16, src *float32, n int)
// n is a positive multiple of 8. Immediate 0: round to nearest even.
TEXT ·narrowHalf8(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
nloop:
	VMOVUPS (SI), Y0
	VCVTPS2PH $0, Y0, (DI)
	ADDQ $32, SI
	ADDQ $16, DI
	DECQ CX
	JNZ  nloop
	VZEROUPPER
	RET

// func prefetchRows2(base unsafe.Pointer, offs *int, n, lines int)
// PREFETCHT0 of lines lines from base+2*offs[i], i < n (n, lines > 0).
TEXT ·prefetchRows2(SB), NOSPLIT, $0-32
	MOVQ base+0(FP), AX
	MOVQ offs+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ lines+24(FP), DX
prow:
	MOVQ (BX), SI
	LEAQ (AX)(SI*2), SI
	MOVQ DX, DI
pline:
	PREFETCHT0 (SI)
	ADDQ $64, SI
	DECQ DI
	JNZ  pline
	ADDQ $8, BX
	DECQ CX
	JNZ  prow
	RET
