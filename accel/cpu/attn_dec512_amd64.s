//go:build goexperiment.simd && amd64

#include "textflag.h"

// The pieces of scoresDec16 and scoresDec16h: DEC_ROWS loads sixteen
// elements of each of the block's sixteen rows into Z0-Z15 (ins VMOVUPS
// from a float32 cache, VCVTPH2PS from a binary16 one, its element size
// scale), DEC_TRANSPOSE leaves element j of the sixteen rows in Zj (tables
// in Z16-Z23), DEC_CHAINS adds q[j] times Zj to the chains in Z24, a
// rounded product then an add, for j in order.
#define DEC_ROW(ins, scale, off, z) \
	MOVQ off(CX), R8 \
	LEAQ (BX)(R8*scale), R8 \
	ins (R8)(R9*1), z
#define DEC_ROWS(ins, scale) \
	DEC_ROW(ins, scale, 0, Z0) \
	DEC_ROW(ins, scale, 8, Z1) \
	DEC_ROW(ins, scale, 16, Z2) \
	DEC_ROW(ins, scale, 24, Z3) \
	DEC_ROW(ins, scale, 32, Z4) \
	DEC_ROW(ins, scale, 40, Z5) \
	DEC_ROW(ins, scale, 48, Z6) \
	DEC_ROW(ins, scale, 56, Z7) \
	DEC_ROW(ins, scale, 64, Z8) \
	DEC_ROW(ins, scale, 72, Z9) \
	DEC_ROW(ins, scale, 80, Z10) \
	DEC_ROW(ins, scale, 88, Z11) \
	DEC_ROW(ins, scale, 96, Z12) \
	DEC_ROW(ins, scale, 104, Z13) \
	DEC_ROW(ins, scale, 112, Z14) \
	DEC_ROW(ins, scale, 120, Z15)
#define DEC_TRANSPOSE \
	VMOVAPS Z0, Z26 \
	VPERMT2PS Z1, Z16, Z0 \
	VPERMT2PS Z26, Z17, Z1 \
	VMOVAPS Z2, Z26 \
	VPERMT2PS Z3, Z16, Z2 \
	VPERMT2PS Z26, Z17, Z3 \
	VMOVAPS Z4, Z26 \
	VPERMT2PS Z5, Z16, Z4 \
	VPERMT2PS Z26, Z17, Z5 \
	VMOVAPS Z6, Z26 \
	VPERMT2PS Z7, Z16, Z6 \
	VPERMT2PS Z26, Z17, Z7 \
	VMOVAPS Z8, Z26 \
	VPERMT2PS Z9, Z16, Z8 \
	VPERMT2PS Z26, Z17, Z9 \
	VMOVAPS Z10, Z26 \
	VPERMT2PS Z11, Z16, Z10 \
	VPERMT2PS Z26, Z17, Z11 \
	VMOVAPS Z12, Z26 \
	VPERMT2PS Z13, Z16, Z12 \
	VPERMT2PS Z26, Z17, Z13 \
	VMOVAPS Z14, Z26 \
	VPERMT2PS Z15, Z16, Z14 \
	VPERMT2PS Z26, Z17, Z15 \
	VMOVAPS Z0, Z26 \
	VPERMT2PS Z2, Z18, Z0 \
	VPERMT2PS Z26, Z19, Z2 \
	VMOVAPS Z1, Z26 \
	VPERMT2PS Z3, Z18, Z1 \
	VPERMT2PS Z26, Z19, Z3 \
	VMOVAPS Z4, Z26 \
	VPERMT2PS Z6, Z18, Z4 \
	VPERMT2PS Z26, Z19, Z6 \
	VMOVAPS Z5, Z26 \
	VPERMT2PS Z7, Z18, Z5 \
	VPERMT2PS Z26, Z19, Z7 \
	VMOVAPS Z8, Z26 \
	VPERMT2PS Z10, Z18, Z8 \
	VPERMT2PS Z26, Z19, Z10 \
	VMOVAPS Z9, Z26 \
	VPERMT2PS Z11, Z18, Z9 \
	VPERMT2PS Z26, Z19, Z11 \
	VMOVAPS Z12, Z26 \
	VPERMT2PS Z14, Z18, Z12 \
	VPERMT2PS Z26, Z19, Z14 \
	VMOVAPS Z13, Z26 \
	VPERMT2PS Z15, Z18, Z13 \
	VPERMT2PS Z26, Z19, Z15 \
	VMOVAPS Z0, Z26 \
	VPERMT2PS Z4, Z20, Z0 \
	VPERMT2PS Z26, Z21, Z4 \
	VMOVAPS Z1, Z26 \
	VPERMT2PS Z5, Z20, Z1 \
	VPERMT2PS Z26, Z21, Z5 \
	VMOVAPS Z2, Z26 \
	VPERMT2PS Z6, Z20, Z2 \
	VPERMT2PS Z26, Z21, Z6 \
	VMOVAPS Z3, Z26 \
	VPERMT2PS Z7, Z20, Z3 \
	VPERMT2PS Z26, Z21, Z7 \
	VMOVAPS Z8, Z26 \
	VPERMT2PS Z12, Z20, Z8 \
	VPERMT2PS Z26, Z21, Z12 \
	VMOVAPS Z9, Z26 \
	VPERMT2PS Z13, Z20, Z9 \
	VPERMT2PS Z26, Z21, Z13 \
	VMOVAPS Z10, Z26 \
	VPERMT2PS Z14, Z20, Z10 \
	VPERMT2PS Z26, Z21, Z14 \
	VMOVAPS Z11, Z26 \
	VPERMT2PS Z15, Z20, Z11 \
	VPERMT2PS Z26, Z21, Z15 \
	VMOVAPS Z0, Z26 \
	VPERMT2PS Z8, Z22, Z0 \
	VPERMT2PS Z26, Z23, Z8 \
	VMOVAPS Z1, Z26 \
	VPERMT2PS Z9, Z22, Z1 \
	VPERMT2PS Z26, Z23, Z9 \
	VMOVAPS Z2, Z26 \
	VPERMT2PS Z10, Z22, Z2 \
	VPERMT2PS Z26, Z23, Z10 \
	VMOVAPS Z3, Z26 \
	VPERMT2PS Z11, Z22, Z3 \
	VPERMT2PS Z26, Z23, Z11 \
	VMOVAPS Z4, Z26 \
	VPERMT2PS Z12, Z22, Z4 \
	VPERMT2PS Z26, Z23, Z12 \
	VMOVAPS Z5, Z26 \
	VPERMT2PS Z13, Z22, Z5 \
	VPERMT2PS Z26, Z23, Z13 \
	VMOVAPS Z6, Z26 \
	VPERMT2PS Z14, Z22, Z6 \
	VPERMT2PS Z26, Z23, Z14 \
	VMOVAPS Z7, Z26 \
	VPERMT2PS Z15, Z22, Z7 \
	VPERMT2PS Z26, Z23, Z15
#define DEC_CHAINS \
	VMULPS.BCST 0(R10), Z0, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 4(R10), Z1, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 8(R10), Z2, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 12(R10), Z3, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 16(R10), Z4, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 20(R10), Z5, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 24(R10), Z6, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 28(R10), Z7, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 32(R10), Z8, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 36(R10), Z9, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 40(R10), Z10, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 44(R10), Z11, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 48(R10), Z12, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 52(R10), Z13, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 56(R10), Z14, Z27 \
	VADDPS Z27, Z24, Z24 \
	VMULPS.BCST 60(R10), Z15, Z27 \
	VADDPS Z27, Z24, Z24

// func prefetchOffs(base unsafe.Pointer, offs *int, n int, lines int)
TEXT ·prefetchOffs(SB), NOSPLIT, $0-32
	MOVQ base+0(FP), AX
	MOVQ offs+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ lines+24(FP), DX
	TESTQ CX, CX
	JLE odone
	TESTQ DX, DX
	JLE odone
orow:
	MOVQ (BX), SI
	LEAQ (AX)(SI*4), SI
	MOVQ DX, DI
oline:
	PREFETCHT0 (SI)
	ADDQ $64, SI
	DECQ DI
	JNZ oline
	ADDQ $8, BX
	DECQ CX
	JNZ orow
odone:
	RET

// func scoresDec16(att, kc unsafe.Pointer, offs *int, nb int, q unsafe.Pointer, hd int, scale float32)
//
// nb blocks of sixteen scores (attn_dec512_kern_amd64.go): per block and
// sixteen elements of the head, the sixteen rows' pieces in Z0-Z15, four
// rounds of two-table permutes (tables in Z16-Z23) leave element j of the
// sixteen rows in Zj, and Z24 (the sixteen chains) adds q[j] times Zj, a
// rounded product, for j in order. Z25 holds the scale.
TEXT ·scoresDec16(SB), NOSPLIT, $0-52
	MOVQ att+0(FP), AX
	MOVQ kc+8(FP), BX
	MOVQ offs+16(FP), CX
	MOVQ nb+24(FP), DX
	MOVQ q+32(FP), SI
	MOVQ hd+40(FP), DI
	SHLQ $2, DI
	VBROADCASTSS scale+48(FP), Z25
	VMOVDQU32 ·decT16+0(SB), Z16
	VMOVDQU32 ·decT16+64(SB), Z17
	VMOVDQU32 ·decT16+128(SB), Z18
	VMOVDQU32 ·decT16+192(SB), Z19
	VMOVDQU32 ·decT16+256(SB), Z20
	VMOVDQU32 ·decT16+320(SB), Z21
	VMOVDQU32 ·decT16+384(SB), Z22
	VMOVDQU32 ·decT16+448(SB), Z23
	TESTQ DX, DX
	JLE sdone
	TESTQ DI, DI
	JLE sdone
sblock:
	VPXORD Z24, Z24, Z24
	XORQ R9, R9
	MOVQ SI, R10
schunk:
	DEC_ROWS(VMOVUPS, 4)
	DEC_TRANSPOSE
	DEC_CHAINS
	ADDQ $64, R10
	ADDQ $64, R9
	CMPQ R9, DI
	JLT schunk
	VDIVPS Z25, Z24, Z24
	VMOVUPS Z24, (AX)
	ADDQ $64, AX
	ADDQ $128, CX
	DECQ DX
	JNZ sblock
sdone:
	VZEROUPPER
	RET

// func scoresDec16h(att, kc unsafe.Pointer, offs *int, nb int, q unsafe.Pointer, hd int, scale float32)
//
// scoresDec16 over an F16 cache: kc and offs in binary16 elements, each
// row's sixteen elements widened by VCVTPH2PS as they are loaded (exact),
// then the same transpose and chains.
TEXT ·scoresDec16h(SB), NOSPLIT, $0-52
	MOVQ att+0(FP), AX
	MOVQ kc+8(FP), BX
	MOVQ offs+16(FP), CX
	MOVQ nb+24(FP), DX
	MOVQ q+32(FP), SI
	MOVQ hd+40(FP), DI
	SHLQ $1, DI
	VBROADCASTSS scale+48(FP), Z25
	VMOVDQU32 ·decT16+0(SB), Z16
	VMOVDQU32 ·decT16+64(SB), Z17
	VMOVDQU32 ·decT16+128(SB), Z18
	VMOVDQU32 ·decT16+192(SB), Z19
	VMOVDQU32 ·decT16+256(SB), Z20
	VMOVDQU32 ·decT16+320(SB), Z21
	VMOVDQU32 ·decT16+384(SB), Z22
	VMOVDQU32 ·decT16+448(SB), Z23
	TESTQ DX, DX
	JLE hdone
	TESTQ DI, DI
	JLE hdone
hblock:
	VPXORD Z24, Z24, Z24
	XORQ R9, R9
	MOVQ SI, R10
hchunk:
	DEC_ROWS(VCVTPH2PS, 2)
	DEC_TRANSPOSE
	DEC_CHAINS
	ADDQ $64, R10
	ADDQ $32, R9
	CMPQ R9, DI
	JLT hchunk
	VDIVPS Z25, Z24, Z24
	VMOVUPS Z24, (AX)
	ADDQ $64, AX
	ADDQ $128, CX
	DECQ DX
	JNZ hblock
hdone:
	VZEROUPPER
	RET

// func vAVDec2x64h(d0, d1, v0, v1 unsafe.Pointer, offs *int, n int, a0, a1 unsafe.Pointer)
//
// vAVDec2x64 over an F16 cache: v0, v1 and offs in binary16 elements,
// each position's 64 values widened by VCVTPH2PS as they are loaded
// (exact); d0 += a0[p]*v0_p and d1 += a1[p]*v1_p, a rounded product then
// an add, for p < n in order.
TEXT ·vAVDec2x64h(SB), NOSPLIT, $0-64
	MOVQ d0+0(FP), AX
	MOVQ d1+8(FP), BX
	MOVQ v0+16(FP), SI
	MOVQ v1+24(FP), DI
	MOVQ offs+32(FP), CX
	MOVQ n+40(FP), DX
	MOVQ a0+48(FP), R10
	MOVQ a1+56(FP), R11
	VMOVUPS 0(AX), Z0
	VMOVUPS 64(AX), Z1
	VMOVUPS 128(AX), Z2
	VMOVUPS 192(AX), Z3
	VMOVUPS 0(BX), Z4
	VMOVUPS 64(BX), Z5
	VMOVUPS 128(BX), Z6
	VMOVUPS 192(BX), Z7
	TESTQ DX, DX
	JLE  adone
aloop:
	MOVQ (CX), R8
	LEAQ (SI)(R8*2), R9
	LEAQ (DI)(R8*2), R8
	VBROADCASTSS (R10), Z8
	VBROADCASTSS (R11), Z9
	VCVTPH2PS 0(R9), Z10
	VCVTPH2PS 0(R8), Z11
	VMULPS Z10, Z8, Z10
	VMULPS Z11, Z9, Z11
	VADDPS Z10, Z0, Z0
	VADDPS Z11, Z4, Z4
	VCVTPH2PS 32(R9), Z12
	VCVTPH2PS 32(R8), Z13
	VMULPS Z12, Z8, Z12
	VMULPS Z13, Z9, Z13
	VADDPS Z12, Z1, Z1
	VADDPS Z13, Z5, Z5
	VCVTPH2PS 64(R9), Z14
	VCVTPH2PS 64(R8), Z15
	VMULPS Z14, Z8, Z14
	VMULPS Z15, Z9, Z15
	VADDPS Z14, Z2, Z2
	VADDPS Z15, Z6, Z6
	VCVTPH2PS 96(R9), Z16
	VCVTPH2PS 96(R8), Z17
	VMULPS Z16, Z8, Z16
	VMULPS Z17, Z9, Z17
	VADDPS Z16, Z3, Z3
	VADDPS Z17, Z7, Z7
	ADDQ $4, R10
	ADDQ $4, R11
	ADDQ $8, CX
	DECQ DX
	JNZ  aloop
adone:
	VMOVUPS Z0, 0(AX)
	VMOVUPS Z1, 64(AX)
	VMOVUPS Z2, 128(AX)
	VMOVUPS Z3, 192(AX)
	VMOVUPS Z4, 0(BX)
	VMOVUPS Z5, 64(BX)
	VMOVUPS Z6, 128(BX)
	VMOVUPS Z7, 192(BX)
	VZEROUPPER
	RET
