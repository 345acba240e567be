package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/quant"
)

// quantCall is a MatMul of T rows of x by W (out x in) quantized to dt, and
// W's dequantised values.
func quantCall(tb testing.TB, r *rand.Rand, dt accel.DType, T, out, in int) (*rcall, []float32, []float32) {
	tb.Helper()
	x := make([]float32, T*in)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	w := make([]float32, out*in)
	for i := range w {
		w[i] = float32(r.NormFloat64()) * 0.1
	}
	qt, _ := dt.Quant()
	wb := make([]byte, int64(out)*dt.RowBytes(in))
	if err := quant.Quantize(qt, w, wb); err != nil {
		tb.Fatal(err)
	}
	wd := make([]float32, out*in)
	if err := quant.Dequantize(qt, wb, wd); err != nil {
		tb.Fatal(err)
	}
	c := &rcall{op: accel.OpMatMul}
	c.o[0] = operand{b: make([]byte, 4*T*out), rows: T, cols: out, dt: accel.F32}
	c.o[1] = operand{b: accel.F32Bytes(x), rows: T, cols: in, dt: accel.F32}
	c.o[2] = operand{b: wb, rows: out, cols: in, dt: dt}
	return c, x, wd
}

var quantDTypes = []accel.DType{accel.Q8_0, accel.Q4_0, accel.Q4_K, accel.Q6_K}

// TestQuantMatMul: the quantized matmul is close to the product with the
// dequantised weights (the activations' 8-bit rounding is the difference),
// the vector and plain-Go kernels give the same bits, and a row's result is
// the same alone as in a batch.
func TestQuantMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, dt := range quantDTypes {
		for _, sh := range [][3]int{{1, 16, 256}, {3, 40, 512}, {5, 33, 768}} {
			T, out, in := sh[0], sh[1], sh[2]
			t.Run(fmt.Sprintf("%s/%dx%dx%d", dt, T, out, in), func(t *testing.T) {
				c, x, wd := quantCall(t, r, dt, T, out, in)
				run := func(vk *vecOps, c *rcall) []float32 {
					old, oldQ := vec.Load(), quantVec.Load()
					vec.Store(vk)
					quantVec.Store(false)
					defer func() { vec.Store(old); quantVec.Store(oldQ) }()
					k := &kctx{}
					return runRef(c, func(c *rcall, lo, hi int) { runMatMul(c, lo, hi, k) })
				}
				plain := run(nil, c)
				for row := 0; row < T; row++ {
					for o := 0; o < out; o++ {
						var ref, mag float64
						for i := 0; i < in; i++ {
							p := float64(x[row*in+i]) * float64(wd[o*in+i])
							ref += p
							mag += math.Abs(p)
						}
						// 8-bit activations: each product off by at most
						// half a step of its block's x scale.
						if got := float64(plain[row*out+o]); math.Abs(got-ref) > 0.02*mag+1e-6 {
							t.Fatalf("row %d out %d: %g, dequantised product %g (|.| sum %g)", row, o, got, ref, mag)
						}
					}
				}
				// Row by row: the same bits.
				for row := 0; row < T; row++ {
					c1 := *c
					c1.o[0] = operand{b: make([]byte, 4*out), rows: 1, cols: out, dt: accel.F32}
					c1.o[1] = operand{b: c.o[1].b[row*in*4 : (row+1)*in*4], rows: 1, cols: in, dt: accel.F32}
					if i, ok := bitsEqual(run(nil, &c1), plain[row*out:(row+1)*out]); !ok {
						t.Fatalf("row %d alone differs at %d", row, i)
					}
				}
				if !quantVecBuilt {
					return
				}
				if !quantPacks(dt) {
					return
				}
				oldQ := quantVec.Load()
				quantVec.Store(true)
				defer quantVec.Store(oldQ)
				p := packWeights(c.o[2])
				k := &kctx{}
				got := runRef(c, func(c *rcall, lo, hi int) {
					p0, p1, t0, t1 := matUnits(c, lo, hi)
					quantizeActs(&k.qa, c.o[1].f32(), in, t0, t1, kBlocks(dt))
					if !runMatMulQuantVec(c, &k.qa, p, p0, p1, t0, t1, k) {
						t.Fatal("no vector kernel")
					}
				})
				if i, ok := bitsEqual(got, plain); !ok {
					t.Fatalf("vector kernels differ at %d: %g, plain Go %g", i, got[i], plain[i])
				}
			})
		}
	}
}
