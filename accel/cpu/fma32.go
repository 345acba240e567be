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
// lower) does fma32Near redo the sum, which is rare in a matmul's sums, so
// the test is a predictable branch.
//
// Only builds with the vector kernels (GOEXPERIMENT=simd on amd64,
// fusedMatMul) fuse: there the hardware's FMA makes the float32 matmul about
// 1.5x faster (docs/BENCH.md), and fma32 is the plain-Go kernels' way to the
// same bits. Builds without them round each product first, as they did
// before: fma32 costs the plain-Go matmul about 3.8x its time, which the
// portable build (and its test suite under -race) cannot afford. Within a
// build every kernel set gives the same bits; across the two kinds of build
// the matmuls differ by rounding.
func fma32(a, b, c float32) float32 {
	s := fmaSum(a, b, c)
	if u := math.Float64bits(s); rareSum(u) {
		return fma32Near(float64(float64(a)*float64(b)), float64(c), s)
	}
	return float32(s)
}

// fmaSum is fma32's float64 sum, a*b (exact) + c rounded once: where
// rareSum is false of its bits, float32 of it is fma32(a, b, c). The
// kernels' loops (dot4) inline it and test their chains' sums together
// (rareSums4), leaving the loop for fma32 at a rare step.
func fmaSum(a, b, c float32) float64 {
	// The explicit conversion keeps a fusing compiler (arm64, ppc64, s390x,
	// riscv64) from merging the product into the addition; the product is
	// exact, so fused or not the bits would agree, but the conversion makes
	// that not depend on it.
	return float64(float64(a)*float64(b)) + float64(c)
}

// rareSum reports whether the float64 sum of bits u lies on a float32
// midpoint (low 29 fraction bits 1<<28) or in float32's subnormal range
// (zero is not rare: a sum that rounds to zero is exact).
func rareSum(u uint64) bool { return rareSums4(u, u, u, u) }

// rareSums4 is rareSum of any of four sums, without branches: x is a
// midpoint where (x+1<<28) has no low 29 bits, i.e. where that minus one
// borrows into bit 63; x<<1 (the sign dropped) minus one is below the
// float32 subnormal bound's only for nonzero sums under it.
func rareSums4(u0, u1, u2, u3 uint64) bool {
	const h, m = 1 << 28, 1<<29 - 1
	mid := ((u0+h)&m - 1) | ((u1+h)&m - 1) | ((u2+h)&m - 1) | ((u3+h)&m - 1)
	tiny := min(u0<<1-1, u1<<1-1, u2<<1-1, u3<<1-1)
	return mid>>63 != 0 || tiny < (1023-126)<<53-1
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

// madd is one term of a float32 matmul chain in this build's rounding:
// fused (fma32) where fusedMatMul, else the product rounded first.
func madd(a, b, c float32) float32 {
	if fusedMatMul {
		return fma32(a, b, c)
	}
	return c + float32(a*b)
}

// FusedMatMul reports whether this build's float32 and bf16 matmuls fuse
// each product with its add (one rounding per term): builds with the
// vector kernels (GOEXPERIMENT=simd on amd64) do, on every kernel set;
// others round each product first. Other devices that want the CPU
// device's bits (the OpenCL parity test) ask it.
func FusedMatMul() bool { return fusedMatMul }
