//go:build goexperiment.simd && amd64

package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

func BenchmarkQ4Panel(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	c, _, _ := quantCall(b, r, accel.Q4_0, 1, 16, 512)
	p := packWeights(c.o[2])
	k := &kctx{}
	quantizeActs(&k.qa, c.o[1].f32(), 512, 0, 1, false)
	y := make([]float32, 16)
	for i := 0; i < b.N; i++ {
		mmQ4_0(unsafe.Pointer(&y[0]), unsafe.Pointer(&k.qa.qx[0]), unsafe.Pointer(&k.qa.dx[0]), unsafe.Pointer(&k.qa.sx[0]), p.panel(0), 16)
	}
	b.ReportMetric(float64(16*512)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
}

// BenchmarkQuantizeActs: 16 rows of 512 quantized to 8 bits (Q8_0's and
// Q8_K's numerics), on the vector kernels and on the scalar functions.
func BenchmarkQuantizeActs(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	c, _, _ := quantCall(b, r, accel.Q4_0, 16, 16, 512)
	for _, k := range []bool{false, true} {
		for _, v := range []bool{true, false} {
			b.Run(fmt.Sprintf("k=%v/vec=%v", k, v), func(b *testing.B) {
				old := quantVec.Load()
				quantVec.Store(v)
				defer quantVec.Store(old)
				a := &qacts{}
				for i := 0; i < b.N; i++ {
					quantizeActs(a, c.o[1].f32(), 512, 0, 16, k)
				}
				b.ReportMetric(float64(16*512)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gvalues/s")
			})
		}
	}
}

// BenchmarkQuantRows times the many-row kernels alone on one thread: 16
// rows of x (already quantized) by 4 panels of 768 inputs, small enough to
// stay in the nearest caches, so that the figure is the kernels' (and the
// loop over panels and rows around them), little disturbed by other work
// on a shared machine. GMAC/cpu-s as in BenchmarkQuantMatMulKernel. The
// T64 cases run 64 rows (a batched decode's, over which a widened panel's
// widening is spread: quant_rows_amd64.go).
func BenchmarkQuantRows(b *testing.B) {
	if !quantVecBuilt {
		b.Skip("no quantized vector kernels here")
	}
	r := rand.New(rand.NewPCG(3, 4))
	const out, in = 64, 768
	for _, tc := range []struct {
		T    int
		name string
	}{{16, ""}, {64, "/T64"}, {512, "/T512"}} {
		for _, dt := range quantDTypes {
			T := tc.T
			c, _, _ := quantCall(b, r, dt, T, out, in)
			p := packWeights(c.o[2])
			k := &kctx{}
			quantizeActs(&k.qa, c.o[1].f32(), in, 0, T, kBlocks(dt))
			eachQuantSet(b, dt.String()+tc.name, func(b *testing.B) {
				cpu0 := processCPU()
				for i := 0; i < b.N; i++ {
					runMatMulQuantVec(c, &k.qa, p, 0, out/panelWidth, 0, T, k)
				}
				if c := processCPU() - cpu0; c > 0 {
					b.ReportMetric(float64(T*in*out)*float64(b.N)/c.Seconds()/1e9, "GMAC/cpu-s")
				}
			})
		}
	}
}

// BenchmarkQuantClassifier times the 110M classifier's matmul at 64 rows
// (batched decode) on one thread: Q6_K, 768 inputs by 32000 outputs, so
// that the panels (20 MB packed) come from memory and the 8 MB of y is
// written out of cache, as in the step (BenchmarkQuantRows's panels and y
// stay in the nearest caches). The weights are 2000 quantized rows
// repeated (the figure does not depend on their values). GMAC/cpu-s as in
// BenchmarkQuantRows.
// `GOEXPERIMENT=simd go test -run XXX -bench QuantClassifier ./accel/cpu`
func BenchmarkQuantClassifier(b *testing.B) {
	if !quantVecBuilt {
		b.Skip("no quantized vector kernels here")
	}
	r := rand.New(rand.NewPCG(5, 6))
	const T, in, out, rows = 64, 768, 32000, 2000
	dt := accel.Q6_K
	c, _, _ := quantCall(b, r, dt, T, rows, in)
	rb := int(dt.RowBytes(in))
	wb := make([]byte, out*rb)
	for o := 0; o < out; o += rows {
		copy(wb[o*rb:], c.o[2].b)
	}
	c.o[2] = operand{b: wb, rows: out, cols: in, dt: dt}
	c.o[0] = operand{b: make([]byte, 4*T*out), rows: T, cols: out, dt: accel.F32}
	p := packWeights(c.o[2])
	k := &kctx{}
	quantizeActs(&k.qa, c.o[1].f32(), in, 0, T, kBlocks(dt))
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		runMatMulQuantVec(c, &k.qa, p, 0, out/panelWidth, 0, T, k)
	}
	if c := processCPU() - cpu0; c > 0 {
		b.ReportMetric(float64(T*in*out)*float64(b.N)/c.Seconds()/1e9, "GMAC/cpu-s")
	}
}
