//go:build goexperiment.simd && amd64

package cpu

//go:generate go run gen_quantrows.go

import (
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// Many-row quantized kernels: one panel's weights applied to several rows
// of x at once, each weight vector loaded (and split into nibbles, or made
// signed) once for those rows (prefill and batched decode). Every output's
// float32 sum takes the same terms in the same order as the one-row
// kernels and the plain-Go reference (quant.go; the integer sums are exact
// in any order), so a row's result does not depend on the rows beside it.
// The kernels take three rows (or two) by the whole 16-output panel, so
// that each broadcast of x serves both 8-output halves' weight vectors (the
// row count is what fits the registers).
//
// The Q8_0, Q4_0, Q4_K and Q6_K kernels are generated (gen_quantrows.go says why:
// the compiler's scheduler keeps a written-out block in source order, and a
// loop's sums spill) into quant_rows_gen_amd64.go, but for mmQ8_0x3, which
// is Go assembly (quant_rows_asm_amd64.go says why). Two things about their
// code are not obvious from it:
//   - Fences. The scheduler issues the loads of a whole written-out block
//     first (they depend on nothing in it), which would hold every group's
//     broadcasts of x in registers at once, spilled (an XMM spill is a
//     legacy-SSE store that stalls on the dirty upper AVX state). So each
//     group ends by storing one of its sums to a local array that nothing
//     reads: a load may not move above a store, so each group's loads come
//     after the previous group's work. One store per group of four rows by
//     8 outputs by 4 inputs; runtime.KeepAlive keeps the stores from being
//     dropped as dead.
//   - Q8_0's sign trick (ggml's AVX2 dot product). VPMADDUBSW multiplies
//     unsigned bytes by signed ones, with pair sums that saturate at 2^15,
//     and a Q8_0 weight is signed. The old kernel split w+128 into nibbles
//     (two VPMADDUBSW, two int16 sums per row and output, less 128·Σx);
//     this one gives VPMADDUBSW |w| (at most 128 as an unsigned byte) and x
//     with w's sign (VPSIGNB; |x| <= 127, so x·sign(w) is an int8 too):
//     pair sums of at most 2·128·127 that cannot saturate, widened to int32
//     by VPMADDWD. The same two multiplies per four inputs, half the sums to
//     keep, no correction (docs/BENCH.md has the figures). Exact for every
//     byte a file may hold (-128 included: TestQuantMatMulRowsExtremes).

// qKernel4 is a many-row kernel (two or three rows: runMatMulQuantVec
// knows which): rows r = 0, 1, ... of x at qx + r·xs (dx at dx + r·ds, sx
// at sx + r·ss) times one panel of 16 outputs over nb blocks, into 16
// float32 at y + r·ys.
type qKernel4 func(y unsafe.Pointer, ys uintptr, qx unsafe.Pointer, xs uintptr, dx, sx unsafe.Pointer, ds, ss uintptr, w unsafe.Pointer, nb int)

// quantRowStep is how many of the n rows left the next kernel call takes:
// the many-row kernel's rows while that leaves no single row behind when
// there is a two-row kernel (n = 3a + 2b: a lone row runs on the one-row
// kernel, which reuses no weight vector), else as many as it takes, else 1.
func quantRowStep(n, rows int, many, two bool) int {
	switch {
	case many && (n == rows || n >= rows+2 || (n > rows && !two)):
		return rows
	case two && n >= 2:
		return 2
	}
	return 1
}

// q8Flip is 0x80 in every byte: a Q8_0 panel's bytes are the values plus
// 128 (quant_pack.go), and xor with it gives them back. mmQ8_0x4 loads it
// from memory at each block instead of keeping it in a register across the
// block loop.
var q8Flip = [32]uint8{
	0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
	0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
}

// q8Low is 0x0f in every byte: the low-nibble mask, loaded where it is
// needed (as q16Ones).
var q8Low = [32]uint8{
	0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f,
	0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f, 0x0f,
}

// q16Ones is 1 in every int16 lane, for VPMADDWD's widening of pair sums:
// a kernel loads it where it needs it, so that the compiler cannot keep it
// in a register (or spill it) across the loop before.
var q16Ones = [16]int16{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}

// q32Low16 is 0xffff in every int32 lane: with a sign-extended Q6_K scale
// s shifted left by 16 it makes the (s, s) int16 pairs of mmQ6_Kx3's and
// mmQ6_Kx2's scale fold.
var q32Low16 = [8]int32{0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff}

// Widened panels. A many-row kernel spends part of each group's work
// making the weight vectors from the packed bits (Q6_K's 6-bit values: one
// or eight vector instructions per group, eleven for each before the
// layout of 2026-12-01's fifth session; Q4_K's nibbles, two or four), and
// it makes them again for every two or three rows. With many rows, the
// panel is widened once into the worker's scratch (kctx.qw), each group's
// vectors as the kernel made them, and the widened kernels load them as
// they are: the same integer sums, in the same float32 order (so the same
// bits as every other path). With nothing to make, a weight vector serves
// two rows as cheaply as three, and two rows keep the super-block's sums
// in registers (three rows' spill): the widened kernels take two rows.
// Measured on one thread (BenchmarkQuantRows, 64 rows): Q6_K about 2x,
// Q4_K about 1.1x. Q4_0 and Q8_0, whose vectors take two to four
// instructions to make, gained nothing widened (three rows or two), and
// are not.

// q6WideBlock is the bytes of one super-block of a widened Q6_K panel:
// d (16 float32, in output order: the packed float16 widened once), the
// scales as (scale, scale) int16 pairs per sub-block
// and half (16·2·32 bytes), then the 6-bit values q' = 63-q (0..63) one
// per byte, group by group of four inputs in input order (64 groups of two
// 32-byte halves, each as gen_quantrows.go's q6Values makes it), then the
// scales of each two sub-blocks 2k and 2k+1 as int16 pairs per half (8·2·32
// bytes, at q6WideBPairs), for the kernel's B = Σ_s scale_s·Σx_s: one
// VPMADDWD per two sub-blocks against the row's two sums as a pair.
const q6WideBlock = 64 + 1024 + 4096 + 512

// q6WideBPairs is where a widened Q6_K super-block's B pairs are: for
// sub-blocks 2k and 2k+1 and half n, at 64k + 32n, output o's two scales
// as one int32 lane's two int16 halves (sub-block 2k's low).
const q6WideBPairs = 64 + 1024 + 4096

// q4kWideBlock is the bytes of one super-block of a widened Q4_K panel:
// d and dmin as float32 (16 each, in output order: the packed ones widened
// once), the scales as (scale, scale) int16 pairs per sub-block and half
// (8·2·32 bytes, at 128), the mins of sub-blocks 2k and 2k+1 as int16
// pairs per half (4·2·32 bytes, at 640: one int32 lane's halves, sub-block
// 2k's low), then each group of four inputs' nibbles as bytes (0..15), in
// input order (64 groups of two 32-byte halves, at 896).
const q4kWideBlock = 896 + 4096

// quantWideMin is the rows of x from which a panel is widened first: the
// widening costs about what three rows of the packed kernel's unpacking
// do, once per panel.
const quantWideMin = 12

// quantWide reports whether a quantized MatMul of rows rows of x on dt's
// panels widens each panel first.
func quantWide(dt accel.DType, rows int) bool {
	return rows >= quantWideMin && (dt == accel.Q6_K || dt == accel.Q4_K)
}

// wideKernels is dt's widened many-row kernels (as runMatMulQuantVec's
// kern4 and kern2) and the first one's rows: two-row kernels both.
func wideKernels(dt accel.DType) (k4, k2 qKernel4, rows int) {
	switch dt {
	case accel.Q4_K:
		return mmQ4_KWx2, mmQ4_KWx2, 2
	case accel.Q6_K:
		return mmQ6_KWx2, mmQ6_KWx2, 2
	}
	panic("cpu: no widened kernels for " + dt.String())
}

// widenPanel widens the nb blocks of dt's packed panel at w into k's
// scratch, returning where.
func widenPanel(k *kctx, dt accel.DType, w unsafe.Pointer, nb int) unsafe.Pointer {
	switch dt {
	case accel.Q4_K:
		k.qw = grow(k.qw, nb*q4kWideBlock)
		widenQ4_K(unsafe.Pointer(&k.qw[0]), w, nb)
	case accel.Q6_K:
		k.qw = grow(k.qw, nb*q6WideBlock)
		widenQ6_K(unsafe.Pointer(&k.qw[0]), w, nb)
	default:
		panic("cpu: no widened panels for " + dt.String())
	}
	return unsafe.Pointer(&k.qw[0])
}
