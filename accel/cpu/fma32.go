package cpu

import "math"

// fma32 returns a*b + c rounded once to float32 (round to nearest even),
// as a fused multiply-add instruction (VFMADD*PS) computes it: the plain-Go
// matmul kernels use it so that they give the vector kernels' bits. Go's
// math.FMA is float64 only, and float32(math.FMA(a, b, c)) rounds twice
// (to float64, then to float32), which is wrong when the first rounding
// lands exactly on a float32 midpoint.
//
// The product of two float32s is exact in float64 (24+24 significand bits,
// exponents far inside float64's range), so only the addition rounds, to
// s. Where s is not a float32 midpoint, float32(s) is the correctly rounded
// result: every midpoint is a float64, so none lies strictly between the
// exact sum and its nearest float64 s, and rounding s or the exact sum to
// float32 gives the same. Only where s lands on a midpoint (low 29
// fraction bits 1<<28) or in float32's subnormal range (whose midpoints lie
// lower; zero included) does fma32Near redo the sum, which is rare in a
// matmul's sums, so the test is a predictable branch.
func fma32(a, b, c float32) float32 {
	// The explicit conversion keeps a fusing compiler (arm64, ppc64, s390x,
	// riscv64) from merging the product into the addition; the product is
	// exact, so fused or not the bits would agree, but the conversion makes
	// that not depend on it.
	p := float64(float64(a) * float64(b))
	s := p + float64(c)
	if u := math.Float64bits(s); u&(1<<29-1) == 1<<28 || u&(0x7ff<<52) < (1023-126)<<52 {
		return fma32Near(p, float64(c), s)
	}
	return float32(s)
}

// fma32Near is fma32 from the exact product p, the addend z and their
// float64 sum s. The sum is made round-to-odd: where it is inexact
// (TwoSum's error e is not zero) and its last significand bit is even, it
// moves one float64 ulp toward the exact value. A round-to-odd result in a
// format of at least 2p+2 bits (53 >= 2*24+2) rounds to p bits as the
// exact value does (Boldo and Melquiond, "When double rounding is odd",
// 2005), so float32(s) is then the correctly rounded fma. The sum of a
// float32 and an exact product is a multiple of 2^-298 and at most about
// 2^256, so s is never subnormal or infinite in float64 where p and z are
// finite, and TwoSum is exact; infinities and NaNs come out of the float64
// arithmetic as the instruction gives them (an inf*0 or inf-inf is a NaN;
// which NaN is not specified), e being NaN there.
//
//go:noinline
func fma32Near(p, z, s float64) float32 {
	// TwoSum (Knuth): e is exactly (p + z) - s.
	bb := s - p
	e := (p - (s - bb)) + (z - bb)
	if u := math.Float64bits(s); e != 0 && e == e && u&1 == 0 {
		// Up in magnitude where e has s's sign, else down (s != 0: a sum
		// that rounds to zero is exact).
		u += 1 - (math.Float64bits(e)^u)>>63<<1
		s = math.Float64frombits(u)
	}
	return float32(s)
}
