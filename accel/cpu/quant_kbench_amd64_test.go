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
