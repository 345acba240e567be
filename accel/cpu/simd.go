package cpu

import (
	"os"
	"sync/atomic"
	"unsafe"
)

// Vector kernels.
//
// Built with GOEXPERIMENT=simd on amd64, the device has kernels on the
// simd/archsimd package (simd_amd64.go, simd_gen_amd64.go; the float32
// and bf16 matmuls in the Go assembly of simd_avx512fma_amd64.s,
// gen_avx512fma.go's), used when the CPU has AVX-512 (F, CD, BW, DQ, VL),
// and 256-bit ones (simd_avx2_amd64.go,
// simd_gen_avx2_amd64.go for the bf16 matmuls and the Go assembly of
// simd_avx2fma_amd64.s, gen_avx2fma.go's, for the float32 ones) where it
// has AVX2 and FMA but not AVX-512; every other build and machine runs the
// plain-Go kernels. All give the same bits: the vector kernels keep the
// reference's order of every float32 operation and vectorise only across
// independent chains (outputs of a matmul, elements of an axpy or of an
// elementwise op). They fuse a multiply with an add only in the float32 and
// bf16 matmuls, where the plain-Go kernels do the same exactly rounded
// operation (fma32); everywhere else a product is rounded before it is
// added. Exponentials are
// computed in float64 vectors to within 2^-46 and rounded once to float32;
// a lane whose value lies too close to a float32 rounding boundary to be
// sure of the same rounding as float32(math.Exp(x)), or whose argument is out
// of the normal range, is recomputed by the scalar function.
//
// Two hazards make such kernels 13-500x slower, and are kept out:
//   - Go inserts no VZEROUPPER and its scalar float code uses the SSE
//     encoding: every vector kernel is its own //go:noinline function that
//     calls archsimd.ClearAVXUpperBits before it returns, holds no scalar
//     float code (scalars enter only as broadcasts), and its callers hold no
//     vector values. hazard_test.go checks this structure on the source;
//     the assembly kernels execute VZEROUPPER before every RET and no
//     legacy-SSE instruction (asm_hazard_test.go).
//   - Asynchronous preemption saves and restores vector registers without
//     clearing them, which with GOAMD64=v3 made scalar code after a vector
//     kernel 500x slower: the vector kernels stay off in GOAMD64=v3 (and
//     higher) builds (goamd64v3).
//
// REPRISE_CPU_SIMD=0 turns the vector kernels off at run time (the plain-Go
// kernels then run in the same binary, with the same results);
// REPRISE_CPU_SIMD=avx2 or avx512 picks that set where the CPU runs it (on
// an AVX-512 CPU, avx2 runs the 256-bit kernels: a comparison of the two,
// with the same results), else the default.

// EnvSIMD turns the vector kernels off when set to 0, or names the kernel
// set to use ("avx2", "avx512") where this build and CPU run it.
const EnvSIMD = "REPRISE_CPU_SIMD"

// mmKernel is a packed-panel matmul block: R rows of x (stride xs bytes)
// times P panels of W (stride ps bytes) over in inputs, into R rows of y
// (stride ys bytes), 16*P outputs per row.
//
// pf, where not 0, is an address the assembly kernels prefetch into L2
// from, 32 bytes further with each input (float32) or input pair (bf16):
// a panel holds 64 bytes an input or pair, so over the call that is half a
// panel's lines (bf16: but the last pair's of an odd input count). The
// caller uses it to bring the next panels in from memory while this block
// computes (matmul.go); a prefetch never faults, and pf 0 runs a loop
// without it. The archsimd kernels ignore it. The bits never depend on it.
type mmKernel func(y unsafe.Pointer, ys uintptr, x unsafe.Pointer, xs uintptr, w unsafe.Pointer, ps uintptr, in int, pf uintptr)

// mmBlocks are the register blocks (R rows of x, P panels) a kernel set's
// matmuls walk, for float32 and bfloat16 weights, over several rows of x
// and over one: each set's fastest, measured by BenchmarkMatMulKernel.
type mmBlocks struct{ f32, bf16, f32Row, bf16Row [2]int }

// mmTable indexes a set's matmul kernels by [R-1][P-1], nil where a block
// has none. A set whose blocks are (R, P) has every block of that
// rectangle (the last rows and panels of a matmul take the smaller ones)
// and (r, 1) for r <= 3 (the partial last panel, matmul.go).
type mmTable [8][8]mmKernel

// vecOps are the vector kernels of a build.
type vecOps struct {
	name      string
	f32, bf16 mmTable
	blocks    mmBlocks
	// scale sets out[j] = w[j] * (s * x[j]).
	scale func(out, x, w []float32, s float32)
	// expShift sets x[i] = exp32(x[i] - m).
	expShift func(x []float32, m float32)
	// div sets x[i] /= s.
	div func(x []float32, s float32)
	// silu sets out[i] = silu(a[i]) * b[i].
	silu func(out, a, b []float32)
	// ropePairs rotates each head of v (len(v) a multiple of the head
	// size len(cos2)) as rotateHead does, from the interleaved angles of
	// ropeEntry; ropeHalves as rotateHalves does (heads of 2*len(cos)).
	// Each product is rounded before the add, as there: the same bits.
	// nil where the set has none.
	ropePairs  func(v, cos2, sin2 []float32)
	ropeHalves func(v, cos, sin []float32)
	// scores sets att[p] = (q · k_p) / scale for every p < len(att),
	// k_p = kc[offs[p]:][:len(q)], each a sequential dot product; len(q)
	// a multiple of 8; maxOff is the largest of offs; qb is scratch of
	// 8*len(q).
	scores func(att, kc []float32, offs []int, maxOff int, q, qb []float32, scale float32)
	// av adds att[p] * vc[offs[p]:][:len(dst)] to dst for every p in order
	// (len(dst) a multiple of 8; maxOff the largest of offs).
	av func(dst, vc []float32, offs []int, maxOff int, att []float32)
	// scoresT sets att[p] = (q · k_p) / scale for p < len(att) (a multiple
	// of eight) from a panel of keys transposed: kt[i*width+p] is element i
	// of k_p, for i < len(q), len(att) <= width. nil where the set has
	// none: attention then transposes the keys inside scores, per query
	// (attn_runs.go).
	scoresT func(att, kt []float32, width int, q []float32, scale float32)
	// scoresT2 is scoresT for two queries over the same panel, a0 from q0
	// and a1 from q1 (len(a1) = len(a0), len(q1) = len(q0)), each vector of
	// keys loaded once for both. nil where the set has none (scoresT then
	// runs for each).
	scoresT2 func(a0, a1, kt []float32, width int, q0, q1 []float32, scale float32)
	// keysT8 transposes eight keys: dst[i*width+j] = kc[offs[j]+i] for
	// j < 8, i < hd (a multiple of eight). Set with scoresT.
	keysT8 func(dst []float32, width int, kc []float32, offs []int, hd int)
	// avRows adds a0[p] * vb[p*hd:][:hd] to d0 for every p < len(a0) in
	// order, hd = len(d0) (a multiple of eight), and the same with a1 to
	// d1 where d1 is not nil (len(a1) = len(a0), len(d1) = hd): the values
	// of a sequence gathered in rows (attn_runs.go). Set with scoresT.
	avRows func(d0, d1, vb, a0, a1 []float32)
	// attn8 is one token's attention for the heads [h0,h1) where the head
	// layout suits it (attn8_amd64.go), false where it does not and nothing
	// was written.
	attn8 func(orow, qrow, kc, vc []float32, offs []int, maxOff, h0, h1, group, hd int, scale float32, k *kctx) bool
	// attnDec is runAttention's work for one token and heads [h0, h1)
	// (a decode step's token, one per sequence) where the set has its own
	// (attn_dec512_amd64.go), false where it does not apply and nothing was
	// written.
	attnDec func(orow, qrow, kc, vc []float32, offs []int, maxOff, n, h0, h1, group, hd int, scale float32, k *kctx, vk *vecOps) bool
	// attnDecHalf is attnDec over F16 caches (kh, vh), where the set
	// widens their rows in its kernels; false for shapes it leaves to the
	// widened copy (half.go).
	attnDecHalf func(orow, qrow []float32, kh, vh []uint16, offs []int, maxOff, n, h0, h1, group, hd int, scale float32, k *kctx, vk *vecOps) bool
	// sum adds x up in no particular order (bandwidth probe only).
	sum func(x []float32) float32
	// max is the maximum of x, false where x is empty or holds a NaN.
	max func(x []float32) (float32, bool)
	// rowSums4 sets sums[i] to the sum of rows[i][:n] in element order.
	rowSums4 func(rows *[4][]float32, n int, sums *[4]float32)
	// quant is the set's own quantized matmul kernels, nil where it runs
	// the AVX2 ones (quant_amd64.go; the AVX-512 VNNI ones are
	// quant_vnni_amd64.go's).
	quant *quantOps
}

// vecBuilt (simd_amd64.go, nosimd.go) is this build's vector kernels
// where the CPU runs them, else nil.

var (
	// vec is the set in use (nil: plain Go).
	vec atomic.Pointer[vecOps]
	// packGo packs weights even without vector kernels and runs the
	// plain-Go panel kernel on them (tests).
	packGo atomic.Bool
)

func init() { vec.Store(chooseSet(os.Getenv(EnvSIMD))) }

// chooseSet is the kernel set to use for the value env of EnvSIMD: none
// for "0" (or where none is built or runs), the runnable set named env,
// else the default (the fastest this CPU runs).
func chooseSet(env string) *vecOps {
	if vecBuilt == nil || goamd64v3 || env == "0" {
		return nil
	}
	for _, v := range vecRunnable {
		if v.name == env {
			return v
		}
	}
	return vecBuilt
}

// simdOps is the vector kernel set in use, nil for plain Go.
func simdOps() *vecOps { return vec.Load() }

// packingOn reports whether MatMul weights get packed copies: where the
// vector set has packed matmul kernels, or packGo.
func packingOn() bool { return vec.Load().hasMM() || packGo.Load() }

// hasMM reports whether v has the packed float32 and bf16 matmul kernels
// (a set without them leaves MatMul to the plain-Go kernels).
func (v *vecOps) hasMM() bool { return v != nil && v.f32[0][0] != nil && v.bf16[0][0] != nil }

// KernelSet names the kernels the device runs: "avx512" or "avx2"
// (archsimd), or "go".
func KernelSet() string {
	if v := vec.Load(); v != nil {
		return v.name
	}
	return "go"
}

// SIMDBuilt reports whether this build has vector kernels that this CPU can
// run (GOEXPERIMENT=simd, amd64, AVX-512 or AVX2 with FMA, not GOAMD64=v3),
// whether or not they are turned off.
func SIMDBuilt() bool { return vecBuilt != nil && !goamd64v3 }
