//go:build goexperiment.simd && amd64

#include "textflag.h"

// mmQ8_0x3: 3 rows of x by one Q8_0 panel (16 outputs), the numerics of the
// one-row kernel mmQ8_0 and of gen_quantrows.go's mmQ8_0x2, written by hand
// (quant_rows_asm_amd64.go says why it is assembly). A panel's block (544 bytes)
// is the 16 outputs' float16 scales (32 bytes, in f16Pos order) and eight
// groups of 4 inputs by 16 outputs, each 64 bytes of the values plus 128
// (quant_pack.go), outputs 0..7 in the first 32.
//
// Per group: the two vectors of weights are flipped back (VPXOR with q8Flip)
// and their magnitudes taken (VPABSB); per row, x's 4 bytes are broadcast,
// given each weight's sign (VPSIGNB), multiplied by the magnitudes in pairs
// (VPMADDUBSW: |pair| <= 2·127·127, no saturation) and folded to int32
// (VPMADDWD by q16Ones) into the row's sums: exact integers, so their
// order does not matter. At a block's end each row's sums become float32
// and (dw·dx)·sum is added to y, as mmQ8_0x2 does: dw widened by its
// shifts and times 2^112, the products and the sum in its order, so the
// bits are its.
//
// Registers: Y0..Y5 the sums (row r, outputs 0..7 and 8..15, in Y(2r) and
// Y(2r+1)), Y6 q8Flip, Y7 q16Ones, Y8/Y9 the signed weights, Y10/Y11 their
// magnitudes, Y12 x broadcast, Y13/Y14 products; y rows AX, R8, BX; x rows
// CX, DI, R10; x's scales SI, R11, R12; the panel DX; blocks left R13,
// groups left R9.
//
// func mmQ8_0x3(y unsafe.Pointer, ys uintptr, qx unsafe.Pointer, xs uintptr, dx, sx unsafe.Pointer, ds, ss uintptr, w unsafe.Pointer, nb int)
TEXT ·mmQ8_0x3(SB), NOSPLIT, $0-80
	MOVQ y+0(FP), AX
	MOVQ ys+8(FP), BX
	MOVQ qx+16(FP), CX
	MOVQ xs+24(FP), R8
	MOVQ dx+32(FP), SI
	MOVQ ds+48(FP), R9
	MOVQ w+64(FP), DX
	MOVQ nb+72(FP), R13
	LEAQ (CX)(R8*1), DI
	LEAQ (DI)(R8*1), R10
	LEAQ (SI)(R9*1), R11
	LEAQ (R11)(R9*1), R12
	LEAQ (AX)(BX*1), R8
	LEAQ (R8)(BX*1), BX
	// y starts at zero: 0 + t is t, as in mmQ8_0x2.
	VPXOR Y0, Y0, Y0
	VMOVDQU Y0, (AX)
	VMOVDQU Y0, 32(AX)
	VMOVDQU Y0, (R8)
	VMOVDQU Y0, 32(R8)
	VMOVDQU Y0, (BX)
	VMOVDQU Y0, 32(BX)
	VMOVDQU ·q8Flip(SB), Y6
	VMOVDQU ·q16Ones(SB), Y7
	TESTQ R13, R13
	JLE mmQ8_0x3_done
mmQ8_0x3_block:
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	ADDQ $32, DX
	MOVQ $8, R9
mmQ8_0x3_group:
	VPXOR (DX), Y6, Y8
	VPABSB Y8, Y10
	VPXOR 32(DX), Y6, Y9
	VPABSB Y9, Y11
	VPBROADCASTD (CX), Y12
	VPSIGNB Y8, Y12, Y13
	VPMADDUBSW Y13, Y10, Y13
	VPMADDWD Y7, Y13, Y13
	VPADDD Y13, Y0, Y0
	VPSIGNB Y9, Y12, Y14
	VPMADDUBSW Y14, Y11, Y14
	VPMADDWD Y7, Y14, Y14
	VPADDD Y14, Y1, Y1
	VPBROADCASTD (DI), Y12
	VPSIGNB Y8, Y12, Y13
	VPMADDUBSW Y13, Y10, Y13
	VPMADDWD Y7, Y13, Y13
	VPADDD Y13, Y2, Y2
	VPSIGNB Y9, Y12, Y14
	VPMADDUBSW Y14, Y11, Y14
	VPMADDWD Y7, Y14, Y14
	VPADDD Y14, Y3, Y3
	VPBROADCASTD (R10), Y12
	VPSIGNB Y8, Y12, Y13
	VPMADDUBSW Y13, Y10, Y13
	VPMADDWD Y7, Y13, Y13
	VPADDD Y13, Y4, Y4
	VPSIGNB Y9, Y12, Y14
	VPMADDUBSW Y14, Y11, Y14
	VPMADDWD Y7, Y14, Y14
	VPADDD Y14, Y5, Y5
	ADDQ $64, DX
	ADDQ $4, CX
	ADDQ $4, DI
	ADDQ $4, R10
	DECQ R9
	JNZ mmQ8_0x3_group
	// The block's scales, 544 bytes back, widened as quant_amd64.go's
	// f16Hi and f16Scale say (no F16C needed): VPUNPCKLWD and VPUNPCKHWD
	// give outputs 0..7 and 8..15 (f16Pos).
	VMOVDQU -544(DX), Y8
	VPSRAW $3, Y8, Y9
	VPAND ·f16Hi(SB), Y9, Y9
	VPSLLW $13, Y8, Y8
	VPUNPCKLWD Y9, Y8, Y12
	VPUNPCKHWD Y9, Y8, Y13
	VMULPS ·f16Scale(SB), Y12, Y12
	VMULPS ·f16Scale(SB), Y13, Y13
	VBROADCASTSS (SI), Y14
	VMULPS Y14, Y12, Y15
	VCVTDQ2PS Y0, Y0
	VMULPS Y0, Y15, Y15
	VADDPS 0(AX), Y15, Y15
	VMOVUPS Y15, 0(AX)
	VMULPS Y14, Y13, Y15
	VCVTDQ2PS Y1, Y1
	VMULPS Y1, Y15, Y15
	VADDPS 32(AX), Y15, Y15
	VMOVUPS Y15, 32(AX)
	ADDQ $4, SI
	VBROADCASTSS (R11), Y14
	VMULPS Y14, Y12, Y15
	VCVTDQ2PS Y2, Y2
	VMULPS Y2, Y15, Y15
	VADDPS 0(R8), Y15, Y15
	VMOVUPS Y15, 0(R8)
	VMULPS Y14, Y13, Y15
	VCVTDQ2PS Y3, Y3
	VMULPS Y3, Y15, Y15
	VADDPS 32(R8), Y15, Y15
	VMOVUPS Y15, 32(R8)
	ADDQ $4, R11
	VBROADCASTSS (R12), Y14
	VMULPS Y14, Y12, Y15
	VCVTDQ2PS Y4, Y4
	VMULPS Y4, Y15, Y15
	VADDPS 0(BX), Y15, Y15
	VMOVUPS Y15, 0(BX)
	VMULPS Y14, Y13, Y15
	VCVTDQ2PS Y5, Y5
	VMULPS Y5, Y15, Y15
	VADDPS 32(BX), Y15, Y15
	VMOVUPS Y15, 32(BX)
	ADDQ $4, R12
	DECQ R13
	JNZ mmQ8_0x3_block
mmQ8_0x3_done:
	VZEROUPPER
	RET
