package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// TestMatMulPackedChecksOperands: the packed vector kernels (the AVX2
// float32 ones in assembly, the rest archsimd) read x and W's panels and
// write y through raw pointers, so runMatMulPacked must hold the operands
// to the rows, inputs and panels the kernels will touch: a call whose x or
// y is shorter than its shape, whose pack is short, or whose pack is of
// another input count panics (as the plain-Go kernels' slicing does)
// instead of reading or writing past the operands. Each short slice keeps
// its capacity here, so a kernel that does run past it stays in memory the
// test owns.
func TestMatMulPackedChecksOperands(t *testing.T) {
	var sets []*vecOps
	for _, vk := range vecSets() {
		if vk.hasMM() {
			sets = append(sets, vk)
		}
	}
	if len(sets) == 0 {
		t.Skip("no packed vector matmul kernels in this build or on this CPU")
	}
	old := vec.Load()
	defer vec.Store(old)
	r := rand.New(rand.NewPCG(31, 32))
	const T, out, in = 3, 32, 16
	cases := []struct {
		name   string
		mangle func(c *rcall, p *packed) *packed
	}{
		{"x short", func(c *rcall, p *packed) *packed { c.o[1].b = c.o[1].b[:len(c.o[1].b)-4]; return p }},
		{"y short", func(c *rcall, p *packed) *packed { c.o[0].b = c.o[0].b[:len(c.o[0].b)-4]; return p }},
		{"pack short", func(c *rcall, p *packed) *packed { q := *p; q.data = q.data[:len(q.data)-64]; return &q }},
		{"pack of other inputs", func(c *rcall, p *packed) *packed {
			w := c.o[2]
			w.cols, w.rows = in/2, 2*out // the same bytes as [out, in]
			return packWeights(w)
		}},
	}
	for _, set := range sets {
		vec.Store(set)
		for _, dt := range []accel.DType{accel.F32, accel.BF16} {
			for _, tc := range cases {
				t.Run(fmt.Sprintf("%s/%s/%s", set.name, dt, tc.name), func(t *testing.T) {
					c := matCall(r, dt, T, out, in)
					p := tc.mangle(c, packWeights(c.o[2]))
					defer func() {
						e := recover()
						if e == nil {
							t.Fatal("runMatMulPacked ran its kernels on operands that do not hold their shapes")
						}
						if err, ok := e.(error); !ok || !strings.HasPrefix(err.Error(), "cpu: matmul") {
							t.Fatalf("panicked with %v, want kernelSpan's error", e)
						}
					}()
					runMatMulPacked(c, p, 0, out/panelWidth, 0, T, &kctx{})
				})
			}
		}
	}
}

// TestMatMulFusedChains: every matmul kernel (row-major plain Go, the
// plain-Go panel kernel, each vector set on each register block) gives
// each output the chain of this build's rounding over its inputs in order:
// where fusedMatMul, one exactly rounded multiply-add per term (fmaExact,
// big.Float), else the product rounded before it is added. The inputs
// (acceltest.FMAChains) make every output's chain meet a term that
// float32(math.FMA) in float64 rounds twice wrongly, at a different step
// in each of four neighbouring outputs (the plain-Go kernel leaves its
// loop for fma32 on one chain's rare step while the others are ordinary),
// at scales 2^-75 to 2^125, in every sign, with float32 and bf16 weights
// and an odd input count. The vector and plain-Go kernels are held to an
// exact reference here, not only to each other.
func TestMatMulFusedChains(t *testing.T) {
	const T, out = 5, 37
	fc := acceltest.NewFMAChains(rand.New(rand.NewPCG(41, 42)), T, out)
	x, w, in := fc.X, fc.W, fc.In
	chain := func(term func(a, b, c float32) float32) []float32 {
		y := make([]float32, T*out)
		for t := range T {
			for o := range out {
				var s float32
				for i := range in {
					s = term(x[t*in+i], w[o*in+i], s)
				}
				y[t*out+o] = s
			}
		}
		return y
	}
	fused := chain(fmaExact)
	unfused := chain(func(a, b, c float32) float32 { return c + float32(a*b) })
	twice := chain(func(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) })
	for i := range fused {
		if !sameFloat32(fused[i], fc.Fused[i]) {
			t.Fatalf("y[%d]: the exact chain %g, FMAChains says %g", i, fused[i], fc.Fused[i])
		}
		if sameFloat32(fused[i], twice[i]) || sameFloat32(fused[i], unfused[i]) {
			t.Fatalf("y[%d]: the exact chain %g is also the twice-rounded %g or the unfused %g: the case tests nothing", i, fused[i], twice[i], unfused[i])
		}
	}
	want, rounding := unfused, "unfused"
	if fusedMatMul {
		want, rounding = fused, "fused"
	}
	old := vec.Load()
	defer vec.Store(old)
	for _, dt := range []accel.DType{accel.F32, accel.BF16} {
		c := &rcall{op: accel.OpMatMul}
		c.o[0] = operand{b: make([]byte, 4*T*out), rows: T, cols: out, dt: accel.F32}
		c.o[1] = operand{b: accel.F32Bytes(x), rows: T, cols: in, dt: accel.F32}
		c.o[2] = operand{b: accel.F32Bytes(w), rows: out, cols: in, dt: accel.F32}
		if dt == accel.BF16 {
			c.o[2] = operand{b: bf16Bytes(w), rows: out, cols: in, dt: accel.BF16}
		}
		p := packWeights(c.o[2])
		check := func(name string, run func(c *rcall, lo, hi int)) {
			t.Helper()
			got := runRef(c, run)
			for i := range want {
				if !sameFloat32(got[i], want[i]) {
					t.Fatalf("%s/%s: y[%d] = %g (%#08x), want the %s chain's %g (%#08x)", dt, name, i,
						got[i], math.Float32bits(got[i]), rounding, want[i], math.Float32bits(want[i]))
				}
			}
		}
		check("rows", func(c *rcall, lo, hi int) { p0, p1, t0, t1 := matUnits(c, lo, hi); runMatMulRows(c, p0, p1, t0, t1) })
		check("panels", func(c *rcall, lo, hi int) {
			p0, p1, t0, t1 := matUnits(c, lo, hi)
			runMatMulPackedGo(c, p, p0, p1, t0, t1)
		})
		// The benchmarks' extra sets too: their figures stand for
		// kernels that compute what the others do.
		for _, set := range append(vecSets(), benchExtraSets()...) {
			if !set.hasMM() {
				continue
			}
			for _, blk := range append([][2]int{{0, 0}}, tableBlocks(set, dt)...) {
				ops := *set
				if blk[0] > 0 { // {0, 0}: the set's own blocks
					ops.blocks = mmBlocks{f32: blk, bf16: blk, f32Row: [2]int{1, blk[1]}, bf16Row: [2]int{1, blk[1]}}
				}
				vec.Store(&ops)
				check(fmt.Sprintf("%s/R%dP%d", set.name, blk[0], blk[1]), func(c *rcall, lo, hi int) {
					p0, p1, t0, t1 := matUnits(c, lo, hi)
					runMatMulPacked(c, p, p0, p1, t0, t1, &kctx{})
				})
			}
		}
	}
}
