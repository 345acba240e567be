package acceltest

import (
	"math"
	"math/rand/v2"
)

// FMAChains is a matmul y = x·Wᵀ whose every output's chain (the sum over
// its inputs in order) meets one term a·w + c where rounding twice goes
// wrong: the exact product is half an ulp of c less 2^-30 of that, so a
// float64 sum (as float32(math.FMA) in float64 computes it) lands on the
// float32 midpoint c ± ulp/2, where c's odd last bit sends the tie to even
// away from c; a product rounded to float32 first is the half ulp itself,
// with the same tie. Correctly rounded, the term gives c back. Each output
// o takes c (weight 1) and then a·w from x's input pair o mod Pairs, the
// other weights zero, so the special term comes at a different step in
// neighbouring outputs; the pairs span scales 2^-75 to 2^125 and every
// sign, and a last odd input has weight zero. W's values are exact in
// bf16.
type FMAChains struct {
	T, In, Out int
	X          []float32 // [T, In]
	W          []float32 // [Out, In]
	// Fused is y with one correctly rounded multiply-add per term: y[t,o]
	// is x[t, 2·(o mod Pairs)].
	Fused []float32
}

// fmaExps are the scales of the input pairs: c is about 2^(m+25).
var fmaExps = []int{-100, -40, -3, 0, 17, 60, 100}

// NewFMAChains makes T rows of x and out outputs.
func NewFMAChains(r *rand.Rand, T, out int) FMAChains {
	// a·w = 2(1-2^-30)·2^m for w = 217/128·2^m (217·9896238 = 2^31-2),
	// against c = (1 + odd·2^-23)·2^(m+25), whose half ulp is 2^(m+1).
	a := float32(math.Ldexp(9896238, -23))
	J := len(fmaExps)
	in := 2*J + 1
	sign := func() float32 { return float32(1 - 2*r.IntN(2)) }
	c := FMAChains{T: T, In: in, Out: out, X: make([]float32, T*in), W: make([]float32, out*in), Fused: make([]float32, T*out)}
	for t := range T {
		for j, m := range fmaExps {
			odd := float64(2*r.IntN(1<<22) + 1)
			c.X[t*in+2*j] = sign() * float32(math.Ldexp(1+math.Ldexp(odd, -23), m+25))
			c.X[t*in+2*j+1] = sign() * a
		}
		c.X[t*in+2*J] = float32(r.NormFloat64())
	}
	for o := range out {
		j := o % J
		c.W[o*in+2*j] = 1
		c.W[o*in+2*j+1] = sign() * float32(math.Ldexp(217.0/128, fmaExps[j]))
		for t := range T {
			c.Fused[t*out+o] = c.X[t*in+2*j]
		}
	}
	return c
}
