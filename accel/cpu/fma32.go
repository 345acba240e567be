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
// exponents far inside float64's range), so only the addition rounds. The
// float64 sum s is made round-to-odd: where it is inexact (TwoSum's error e
// is not zero) and its last significand bit is even, it moves one float64
// ulp toward the exact value. A round-to-odd result in a format of at
// least 2p+2 bits (53 >= 2*24+2) rounds to p bits as the exact value does
// (Boldo and Melquiond, "When double rounding is odd", 2005), so float32(s)
// is the correctly rounded fma. The sum of a float32 and an exact product
// is a multiple of 2^-298 and at most about 2^256, so s is never subnormal
// or infinite in float64 where its inputs are finite, and TwoSum is exact.
// Infinities and NaNs come out of the float64 arithmetic as the instruction
// gives them (an inf*0 or inf-inf is a NaN; which NaN is not specified).
func fma32(a, b, c float32) float32 {
	// The explicit conversion keeps a fusing compiler (arm64, ppc64, s390x,
	// riscv64) from merging the product into the additions below; the
	// product is exact, so fused or not the bits would agree, but the
	// conversion makes that not depend on it.
	p := float64(float64(a) * float64(b))
	z := float64(c)
	s := p + z
	// TwoSum (Knuth): e is exactly (p + z) - s for finite p and z.
	bb := s - p
	e := (p - (s - bb)) + (z - bb)
	if e != 0 && !math.IsNaN(e) {
		if u := math.Float64bits(s); u&1 == 0 {
			// s != 0 (a sum that rounds to zero is exact). Toward the
			// exact value: up in magnitude where e has s's sign.
			if (e > 0) == (s > 0) {
				u++
			} else {
				u--
			}
			s = math.Float64frombits(u)
		}
	}
	return float32(s)
}
