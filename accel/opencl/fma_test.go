package opencl_test

import (
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	"github.com/reprise-ml/reprise/accel/cpu"
)

// TestMatMulFMA: the float32 and bf16 matmuls' fma() is correctly rounded
// on this device, not a float64 sum rounded again (or a product rounded
// first): on chains where either would differ by an ulp
// (acceltest.FMAChains) each output is exactly the correctly rounded
// chain's, and so the CPU device's bits where its build fuses
// (cpu.FusedMatMul); elsewhere the two agree within rounding.
func TestMatMulFMA(t *testing.T) {
	p := newPair(t)
	fc := acceltest.NewFMAChains(rand.New(rand.NewPCG(71, 72)), 5, 37)
	x := p.f32(fc.X, fc.T, fc.In)
	w := p.f32(fc.W, fc.Out, fc.In)
	wb := p.bf16(fc.W, fc.Out, fc.In)
	y, yb := p.zeros(accel.F32, fc.T, fc.Out), p.zeros(accel.F32, fc.T, fc.Out)
	p.run(func(l *accel.Launcher, s func(twin) accel.Tensor) {
		l.MatMul(s(y), s(x), s(w))
		l.MatMul(s(yb), s(x), s(wb))
	})
	for _, r := range []struct {
		name string
		y    twin
	}{{"matmul", y}, {"matmul bf16", yb}} {
		o, c := p.readF32(r.y)
		if err := acceltest.SameBits(o, fc.Fused); err != nil {
			t.Errorf("%s: not the correctly rounded chain: %v", r.name, err)
		}
		if cpu.FusedMatMul() {
			if err := acceltest.SameBits(o, c); err != nil {
				t.Errorf("%s against the CPU device: %v", r.name, err)
			}
		} else if err := acceltest.Close(o, c, 1e-5); err != nil {
			t.Errorf("%s against the CPU device: %v", r.name, err)
		}
	}
}
