package cpu

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// unclearedKernel is a vector kernel that skips ClearAVXUpperBits (simd
// builds only).
var unclearedKernel mmKernel

// BenchmarkScalarAfterVector measures the first hazard: a small scalar
// kernel (a 64x64 row-major GEMV, scalar float code) alone, after a vector
// kernel (which clears the upper halves of the vector registers on return),
// and after a vector kernel that does not. The per-op figures of "scalar"
// and "vector+scalar" minus "vector" should match; "uncleared+scalar" shows
// what the clearing saves (the scalar code's SSE instructions each wait on
// the dirty upper state).
func BenchmarkScalarAfterVector(b *testing.B) {
	const in, out = 64, 64
	r := rand.New(rand.NewPCG(1, 2))
	c := matCall(r, accel.F32, 1, out, in)
	p := packWeights(c.o[2])
	y := make([]float32, out)
	vk := func(k mmKernel) {
		k(unsafe.Pointer(&y[0]), 0, unsafe.Pointer(&c.o[1].b[0]), 0, p.panel(0), p.ps, in, 0)
	}
	scalar := func() { runMatMulRows(c, 0, out/16, 0, 1) }
	b.Run("scalar", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			scalar()
		}
	})
	if !vecBuilt.hasMM() {
		b.Skip("no vector matmul kernels in this build or on this CPU")
	}
	b.Run("vector", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			vk(vecBuilt.f32[0][3])
		}
	})
	b.Run("vector+scalar", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			vk(vecBuilt.f32[0][3])
			scalar()
		}
	})
	if unclearedKernel != nil {
		b.Run("uncleared+scalar", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				vk(unclearedKernel)
				scalar()
			}
		})
	}
}
