//go:build goexperiment.simd && amd64

package cpu

import (
	"os"
	"simd/archsimd"
	"unsafe"
)

// exp64VecBuilt: this build and CPU can run vExpShift64 (256-bit, AVX2 and
// FMA; REPRISE_CPU_SIMD=0 and GOAMD64=v3 builds turn it off as they do the
// other vector kernels). It is used only where math.Exp is the FMA variant
// it reproduces, which init checks on the probes (exp64VecOK).
var exp64VecBuilt = archsimd.X86.AVX2() && archsimd.X86.FMA() && !goamd64v3 && os.Getenv(EnvSIMD) != "0"

// expShift64Vec sets out[i] = exp(float64(x[i] - m)) for len(x) &^ 3
// elements by math.Exp's FMA variant (expFMA), four at a time, and reports
// how many it set; lanes whose argument lies outside ±expFastRange (or is
// NaN) hold no meaningful value, and the caller recomputes them.
func expShift64Vec(out []float64, x []float32, m float32) int {
	n := len(x) &^ 3
	if n == 0 {
		return 0
	}
	vExpShift64(unsafe.Pointer(&out[:n][0]), unsafe.Pointer(&x[0]), n, m)
	return n
}

// vExpShift64 is expFMA on four lanes at a time, operation for operation
// (the rounding to k by the magic add, 2^k from the bits of that sum).
//
//go:noinline
//go:norace
//go:nocheckptr
func vExpShift64(out, x unsafe.Pointer, n int, m float32) {
	mv := archsimd.BroadcastFloat32x4(m)
	log2e := archsimd.BroadcastFloat64x4(expLog2E)
	round := archsimd.BroadcastFloat64x4(expRound)
	ln2u := archsimd.BroadcastFloat64x4(-expLn2U)
	ln2l := archsimd.BroadcastFloat64x4(-expLn2L)
	sixteenth := archsimd.BroadcastFloat64x4(0.0625)
	c7 := archsimd.BroadcastFloat64x4(expC7)
	c6 := archsimd.BroadcastFloat64x4(expC6)
	c5 := archsimd.BroadcastFloat64x4(expC5)
	c4 := archsimd.BroadcastFloat64x4(expC4)
	c3 := archsimd.BroadcastFloat64x4(expC3)
	c2 := archsimd.BroadcastFloat64x4(expC2)
	half := archsimd.BroadcastFloat64x4(0.5)
	one := archsimd.BroadcastFloat64x4(1)
	two := archsimd.BroadcastFloat64x4(2)
	bias := archsimd.BroadcastInt64x4(0x3ff)
	// A per-lane shift (VPSLLVQ), as in the quantized kernels: a shift
	// by a constant count is compiled with a legacy-SSE move in the loop.
	shift := archsimd.BroadcastInt64x4(52)
	for i := 0; i < n; i += 4 {
		a := archsimd.LoadFloat32x4((*[4]float32)(unsafe.Add(x, 4*i))).Sub(mv).ConvertToFloat64()
		t := a.Mul(log2e).Add(round)
		kf := t.Sub(round)
		r := ln2u.MulAdd(kf, a)
		r = ln2l.MulAdd(kf, r)
		r = r.Mul(sixteenth)
		p := c7.MulAdd(r, c6)
		p = p.MulAdd(r, c5)
		p = p.MulAdd(r, c4)
		p = p.MulAdd(r, c3)
		p = p.MulAdd(r, c2)
		p = p.MulAdd(r, half)
		p = p.MulAdd(r, one)
		r = r.Mul(p)
		r = r.Mul(r.Add(two))
		r = r.Mul(r.Add(two))
		r = r.Mul(r.Add(two))
		r = r.MulAdd(r.Add(two), one)
		// t's bits are those of 1.5·2^52 plus k: (bits + 0x3ff) << 52 is
		// 2^k's (the high bits shift out).
		p2 := t.AsInt64x4().Add(bias).ShiftLeft(shift).AsFloat64x4()
		r.Mul(p2).Store((*[4]float64)(unsafe.Add(out, 8*i)))
	}
	archsimd.ClearAVXUpperBits()
}
