//go:build goexperiment.simd && amd64

#include "textflag.h"

// GROUP_ROW adds one row's products with a group's weights (Y8..Y11) to
// its sums c0 (outputs 0..7) and c1 (8..15), x's 4 bytes at (x).
#define GROUP_ROW(x, c0, c1) \
	VPBROADCASTD (x), Y12 \
	VPSIGNB Y8, Y12, Y13 \
	VPMADDUBSW Y13, Y10, Y13 \
	VPMADDWD Y7, Y13, Y13 \
	VPADDD Y13, c0, c0 \
	VPSIGNB Y9, Y12, Y14 \
	VPMADDUBSW Y14, Y11, Y14 \
	VPMADDWD Y7, Y14, Y14 \
	VPADDD Y14, c1, c1

// BLOCK_ROW adds (dw·dx)·sum to one row's 16 outputs at (y), dw in Y12
// (outputs 0..7) and Y13 (8..15), dx at (d), and moves d to the next
// block's scale.
#define BLOCK_ROW(d, y, c0, c1) \
	VBROADCASTSS (d), Y14 \
	VMULPS Y14, Y12, Y15 \
	VCVTDQ2PS c0, c0 \
	VMULPS c0, Y15, Y15 \
	VADDPS 0(y), Y15, Y15 \
	VMOVUPS Y15, 0(y) \
	VMULPS Y14, Y13, Y15 \
	VCVTDQ2PS c1, c1 \
	VMULPS c1, Y15, Y15 \
	VADDPS 32(y), Y15, Y15 \
	VMOVUPS Y15, 32(y) \
	ADDQ $4, d

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
	GROUP_ROW(CX, Y0, Y1)
	GROUP_ROW(DI, Y2, Y3)
	GROUP_ROW(R10, Y4, Y5)
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
	BLOCK_ROW(SI, AX, Y0, Y1)
	BLOCK_ROW(R11, R8, Y2, Y3)
	BLOCK_ROW(R12, BX, Y4, Y5)
	DECQ R13
	JNZ mmQ8_0x3_block
mmQ8_0x3_done:
	VZEROUPPER
	RET
