//go:build goexperiment.simd && amd64

package cpu

import (
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

func BenchmarkQuantizeActs(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	c, _, _ := quantCall(b, r, accel.Q4_0, 1, 16, 512)
	k := &kctx{}
	for i := 0; i < b.N; i++ {
		quantizeActs(&k.qa, c.o[1].f32(), 512, 0, 1, false)
	}
}
