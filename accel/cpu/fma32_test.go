package cpu

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// fmaExact is a*b + c rounded once to float32, from the exact sum in
// big.Float arithmetic (big.Float's Float32 rounds to nearest even, float32
// subnormals and overflow included); infinities and NaNs by float64
// arithmetic, which classifies them as IEEE 754 does.
func fmaExact(a, b, c float32) float32 {
	fa, fb, fc := float64(a), float64(b), float64(c)
	for _, v := range []float64{fa, fb, fc} {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return float32(fa*fb + fc)
		}
	}
	const prec = 1200 // exact: the sum spans at most 2^256 to 2^-298
	p := new(big.Float).SetPrec(prec).Mul(new(big.Float).SetFloat64(fa), new(big.Float).SetFloat64(fb))
	s := new(big.Float).SetPrec(prec).Add(p, new(big.Float).SetFloat64(fc))
	if s.Sign() == 0 {
		// An exact zero is -0 only where both addends are -0.
		pneg := math.Signbit(fa) != math.Signbit(fb)
		if p.Sign() == 0 && pneg && math.Signbit(fc) {
			return float32(math.Copysign(0, -1))
		}
		return 0
	}
	r, _ := s.Float32()
	return r
}

// sameFloat32 is bit equality, any NaN matching any NaN (the kernels'
// inputs hold no NaN payloads; which NaN an inf-inf gives is not at stake).
func sameFloat32(x, y float32) bool {
	if x != x && y != y {
		return true
	}
	return math.Float32bits(x) == math.Float32bits(y)
}

// fmaMidpoints are inputs whose float64 sum rounds onto a float32
// midpoint while the exact value lies off it, at many scales and signs:
// where c's last bit is odd, tie-to-even goes away from the exact value,
// so that a double rounding is wrong. |a*b| = 2^-24(1-2^-36)·2^k is just
// below half an ulp of |c| = (1+2^-23)·2^k, in every combination of signs
// (the sum just inside c's or its neighbour's half of the interval).
func fmaMidpoints() [][3]float32 {
	a0 := float32(math.Ldexp(1+math.Ldexp(1, -18), -12))
	b0 := float32(math.Ldexp(1-math.Ldexp(1, -18), -12))
	var cs [][3]float32
	for k := -140; k <= 127; k += 3 {
		c := math.Ldexp(1+math.Ldexp(1, -23), k)
		for _, sg := range [][3]float64{{1, 1, 1}, {-1, 1, -1}, {1, -1, -1}, {-1, -1, 1}, {1, -1, 1}, {-1, 1, 1}} {
			// Split 2^k between a and b to keep both normal.
			ka := k / 2
			a := float32(math.Ldexp(sg[0]*float64(a0), ka))
			b := float32(math.Ldexp(sg[1]*float64(b0), k-ka))
			cs = append(cs, [3]float32{a, b, float32(sg[2] * c)})
		}
	}
	return cs
}

// fmaEdges are double roundings at the ends of float32's range, where the
// midpoint a float64 sum lands on is not one fmaMidpoints makes: c an odd
// subnormal (0x00400001, its ulp 2^-149) plus just under half its ulp
// (a·b = 2^-150(1-2^-46)), which rounds up instead of staying at c; and
// ±MaxFloat32 plus just under half its ulp (2^103(1-2^-46)), whose float64
// sum is the overflow threshold 2^128-2^103, where a tie goes to the even
// 2^128, infinity, instead of staying finite.
func fmaEdges() [][3]float32 {
	l := func(m float64, e int) float32 { return float32(math.Ldexp(m, e)) }
	sub := math.Float32frombits(0x00400001)
	return [][3]float32{
		{l(1+0x1p-23, -75), l(1-0x1p-23, -75), sub},
		{l(-(1 + 0x1p-23), -75), l(1-0x1p-23, -75), -sub},
		{l(1+0x1p-23, 52), l(1-0x1p-23, 51), math.MaxFloat32},
		{l(1+0x1p-23, 52), l(-(1 - 0x1p-23), 51), -math.MaxFloat32},
	}
}

func TestFMA32Midpoints(t *testing.T) {
	for _, x := range fmaEdges() {
		want := fmaExact(x[0], x[1], x[2])
		if got := fma32(x[0], x[1], x[2]); !sameFloat32(got, want) {
			t.Fatalf("fma32(%g, %g, %g) = %g (%#08x), want %g (%#08x)", x[0], x[1], x[2], got, math.Float32bits(got), want, math.Float32bits(want))
		}
		if twice := float32(math.FMA(float64(x[0]), float64(x[1]), float64(x[2]))); sameFloat32(twice, want) {
			t.Fatalf("fma32(%g, %g, %g): float32(math.FMA) is right too (%#08x): the case tests nothing", x[0], x[1], x[2], math.Float32bits(want))
		}
	}
	cases := fmaMidpoints()
	naiveWrong := 0
	for _, x := range cases {
		want := fmaExact(x[0], x[1], x[2])
		if got := fma32(x[0], x[1], x[2]); !sameFloat32(got, want) {
			t.Fatalf("fma32(%g, %g, %g) = %g (%#08x), want %g (%#08x)", x[0], x[1], x[2], got, math.Float32bits(got), want, math.Float32bits(want))
		}
		if !sameFloat32(float32(math.FMA(float64(x[0]), float64(x[1]), float64(x[2]))), want) {
			naiveWrong++
		}
	}
	// The cases must be ones that a double rounding gets wrong, or they
	// test nothing.
	if naiveWrong < len(cases)/4 {
		t.Fatalf("float32(math.FMA) is wrong on only %d of %d midpoint cases", naiveWrong, len(cases))
	}
}

// TestFMA32 holds fma32 to the exact reference on special operands (signed
// zeros, subnormals, the largest and smallest floats, infinities, NaN),
// on random bit patterns (every class), on near-cancellations (c close to
// -a*b) and on products whose float32 results are subnormal.
func TestFMA32(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.5, 3, math.MaxFloat32, -math.MaxFloat32,
		math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, 0x1p-126, -0x1p-126, 0x1.fffffcp-127,
		1 + 0x1p-23, 1 - 0x1p-24, 0x1p64, 0x1p-64,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	check := func(a, b, c float32) {
		t.Helper()
		if got, want := fma32(a, b, c), fmaExact(a, b, c); !sameFloat32(got, want) {
			t.Fatalf("fma32(%g, %g, %g) [%#08x %#08x %#08x] = %g (%#08x), want %g (%#08x)", a, b, c,
				math.Float32bits(a), math.Float32bits(b), math.Float32bits(c), got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
	for _, a := range special {
		for _, b := range special {
			for _, c := range special {
				check(a, b, c)
			}
		}
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 20000 {
		a, b, c := math.Float32frombits(r.Uint32()), math.Float32frombits(r.Uint32()), math.Float32frombits(r.Uint32())
		check(a, b, c)
		// c near -a*b: the sum cancels to a few bits, or to zero.
		pr := float32(float64(a) * float64(b))
		check(a, b, -pr)
		check(a, b, math.Float32frombits(math.Float32bits(-pr)+uint32(r.IntN(3))-1))
		// Small operands: subnormal products and sums.
		sa := math.Float32frombits(r.Uint32()&0x807fffff | uint32(r.IntN(40))<<23)
		sb := math.Float32frombits(r.Uint32()&0x807fffff | uint32(40+r.IntN(60))<<23)
		check(sa, sb, math.Float32frombits(r.Uint32()&0x80ffffff))
		// Typical matmul magnitudes: an accumulated sum and a product.
		check(float32(r.NormFloat64()), float32(r.NormFloat64()*0.3), float32(r.NormFloat64()*8))
	}
}

// FuzzFMA32: fma32 equals the exact reference on any bits.
func FuzzFMA32(f *testing.F) {
	for _, x := range append(fmaMidpoints()[:20], fmaEdges()...) {
		f.Add(math.Float32bits(x[0]), math.Float32bits(x[1]), math.Float32bits(x[2]))
	}
	f.Add(uint32(0x80000000), uint32(0x3f800000), uint32(0x80000000))
	f.Add(uint32(0x7f800000), uint32(0), uint32(1))
	f.Add(uint32(0x00000001), uint32(0x3f000000), uint32(0x80000001))
	f.Fuzz(func(t *testing.T, ua, ub, uc uint32) {
		a, b, c := math.Float32frombits(ua), math.Float32frombits(ub), math.Float32frombits(uc)
		if got, want := fma32(a, b, c), fmaExact(a, b, c); !sameFloat32(got, want) {
			t.Fatalf("fma32(%#08x, %#08x, %#08x) = %#08x, want %#08x", ua, ub, uc, math.Float32bits(got), math.Float32bits(want))
		}
	})
}

// BenchmarkFMA32 times fma32 against the separate multiply and add it
// replaced in the plain-Go kernels, on one chain of 1024 terms.
func BenchmarkFMA32(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	x, w := make([]float32, 1024), make([]float32, 1024)
	for i := range x {
		x[i], w[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	var sink float32
	b.Run("fma32", func(b *testing.B) {
		for range b.N {
			var s float32
			for i, v := range x {
				s = fma32(v, w[i], s)
			}
			sink += s
		}
	})
	b.Run("mul-add", func(b *testing.B) {
		for range b.N {
			var s float32
			for i, v := range x {
				s += float32(v * w[i])
			}
			sink += s
		}
	})
	_ = sink
}
