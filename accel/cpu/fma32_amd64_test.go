//go:build goexperiment.simd && amd64

package cpu

import (
	"math"
	"math/rand/v2"
	"simd/archsimd"
	"testing"
)

// hwFMA8 is the CPU's fused multiply-add (VFMADD213PS) on eight lanes:
// a*b + c rounded once.
//
//go:noinline
func hwFMA8(a, b, c, out *[8]float32) {
	archsimd.LoadFloat32x8(a).MulAdd(archsimd.LoadFloat32x8(b), archsimd.LoadFloat32x8(c)).Store(out)
	archsimd.ClearAVXUpperBits()
}

// TestFMA32Hardware holds fma32 to the CPU's own FMA instruction, the
// operation the vector kernels run, on every kind of input FuzzFMA32 and
// TestFMA32 reach (random bits, cancellations, subnormal products and
// sums, midpoint and edge cases, typical matmul values): an oracle
// independent of the big.Float reference.
func TestFMA32Hardware(t *testing.T) {
	if !archsimd.X86.FMA() || !archsimd.X86.AVX() {
		t.Skip("no FMA on this CPU")
	}
	r := rand.New(rand.NewPCG(61, 62))
	var cases [][3]float32
	cases = append(cases, fmaMidpoints()...)
	cases = append(cases, fmaEdges()...)
	for range 20000 {
		u := func() float32 { return math.Float32frombits(r.Uint32()) }
		a, b := u(), u()
		pr := float32(float64(a) * float64(b))
		small := func(e0, n int) float32 { return math.Float32frombits(r.Uint32()&0x807fffff | uint32(e0+r.IntN(n))<<23) }
		cases = append(cases, [3]float32{a, b, u()}, [3]float32{a, b, -pr},
			[3]float32{a, b, math.Float32frombits(math.Float32bits(-pr) + uint32(r.IntN(3)) - 1)},
			[3]float32{small(0, 40), small(40, 60), math.Float32frombits(r.Uint32() & 0x80ffffff)},
			[3]float32{float32(r.NormFloat64()), float32(r.NormFloat64() * 0.3), float32(r.NormFloat64() * 8)})
	}
	for len(cases)%8 != 0 {
		cases = append(cases, [3]float32{1, 1, 1})
	}
	for i := 0; i < len(cases); i += 8 {
		var a, b, c, hw [8]float32
		for j := range 8 {
			a[j], b[j], c[j] = cases[i+j][0], cases[i+j][1], cases[i+j][2]
		}
		hwFMA8(&a, &b, &c, &hw)
		for j := range 8 {
			if got := fma32(a[j], b[j], c[j]); !sameFloat32(got, hw[j]) {
				t.Fatalf("fma32(%#08x, %#08x, %#08x) = %#08x, the CPU's FMA %#08x", math.Float32bits(a[j]),
					math.Float32bits(b[j]), math.Float32bits(c[j]), math.Float32bits(got), math.Float32bits(hw[j]))
			}
		}
	}
}
