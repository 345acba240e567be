//go:build goexperiment.simd && amd64

package cpu

import "simd/archsimd"

//go:generate go run gen_avx2mm.go

// The 256-bit (AVX2) kernel set, for CPUs without AVX-512: the packed
// matmul kernels of simd_gen_avx2_amd64.go, which give the plain-Go and the
// AVX-512 kernels' bits (each output one chain in input order, a separate
// multiply and add). The other operations run the plain-Go functions below
// until they have 256-bit kernels of their own; they are the reference
// loops, so the set's results are the plain-Go set's.

// avx2Runs: this CPU runs the 256-bit kernels (AVX2 and FMA: the matmuls
// need only AVX, but every x86-64 CPU with AVX2 since 2013 has FMA, and the
// other kernels of the set may use it).
var avx2Runs = archsimd.X86.AVX2() && archsimd.X86.FMA()

// avx2MatOps is the AVX2 kernel set where this CPU runs it, else nil.
func avx2MatOps() *vecOps {
	if !avx2Runs {
		return nil
	}
	return &vecOps{
		name: "avx2",
		f32:  avx2F32Kernels,
		bf16: avx2BF16Kernels,
		// The largest blocks that fit in registers (gen_avx2mm.go).
		blocks:   mmBlocks{f32: [2]int{2, 2}, bf16: [2]int{2, 1}, f32Row: [2]int{1, 3}, bf16Row: [2]int{1, 2}},
		scale:    rmsScaleGo,
		expShift: expShiftGo,
		div:      divGo,
		silu:     siluMulGo,
		scores:   scoresGo,
		av:       avGo,
		sum:      sumGo,
		max:      maxGo,
		rowSums4: rowSums4Go,
	}
}

func expShiftGo(x []float32, m float32) {
	for i, v := range x {
		x[i] = exp32(v - m)
	}
}

func divGo(x []float32, s float32) {
	for i := range x {
		x[i] /= s
	}
}

func scoresGo(att, kc []float32, offs []int, _ int, qb []float32, hd int, scale float32) {
	for p := range att[:len(att)&^7] {
		kv := kc[offs[p] : offs[p]+hd]
		var s float32
		for i, v := range kv {
			s += float32(qb[8*i] * v)
		}
		att[p] = s / scale
	}
}

func avGo(dst, vc []float32, offs []int, _ int, att []float32) {
	for p, o := range offs {
		vv := vc[o : o+len(dst)]
		a := att[p]
		for i := range dst {
			dst[i] += float32(a * vv[i])
		}
	}
}

func sumGo(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += v
	}
	return s
}

func maxGo(x []float32) (float32, bool) {
	if len(x) == 0 {
		return 0, false
	}
	m := x[0]
	for _, v := range x {
		if v != v {
			return 0, false
		}
		if v > m {
			m = v
		}
	}
	return m, true
}

func rowSums4Go(rows *[4][]float32, n int, sums *[4]float32) {
	for i, r := range rows {
		var s float32
		for _, v := range r[:n] {
			s += v
		}
		sums[i] = s
	}
}
