package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

func benchVec(b *testing.B, on bool, fn func()) {
	if on && vecBuilt == nil {
		b.Skip("no vector kernels in this build")
	}
	old := vec.Load()
	defer vec.Store(old)
	if on {
		vec.Store(vecBuilt)
	} else {
		vec.Store(nil)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fn()
	}
}

func BenchmarkSiLU(b *testing.B) {
	for _, n := range []int{86, 4096} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { benchSiLU(b, n) })
	}
}

func benchSiLU(b *testing.B, n int) {
	r := rand.New(rand.NewPCG(1, 2))
	a, bb, out := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], bb[i] = float32(r.NormFloat64()*3), float32(r.NormFloat64())
	}
	for _, on := range []bool{false, true} {
		name := "go"
		if on {
			name = "simd"
		}
		b.Run(name, func(b *testing.B) {
			benchVec(b, on, func() {
				if vk := simdOps(); vk != nil {
					vk.silu(out, a, bb)
				} else {
					siluMulGo(out, a, bb)
				}
			})
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/elem")
		})
	}
}

func BenchmarkSoftmax(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{64, 512} {
		x, y := make([]float32, n), make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 3)
		}
		for _, on := range []bool{false, true} {
			name := "go"
			if on {
				name = "simd"
			}
			b.Run(fmt.Sprintf("%d/%s", n, name), func(b *testing.B) {
				benchVec(b, on, func() {
					copy(y, x)
					softmax32(y)
				})
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/elem")
			})
		}
	}
}

// BenchmarkRMSScale: RMSNorm's scaling of a 768-wide row (the 110M shape).
func BenchmarkRMSScale(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 768
	x, w, out := normF32(r, n), normF32(r, n), make([]float32, n)
	for _, on := range []bool{false, true} {
		name := "go"
		if on {
			name = "simd"
		}
		b.Run(name, func(b *testing.B) {
			benchVec(b, on, func() { rmsScale(out, x, w, 0.37) })
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/elem")
		})
	}
}

// attnTail is an attention call of the 110M shape's head layout (12 heads
// of 64, no grouping) for T queries of one sequence at the end of a
// context of ctx positions (positions ctx-T..ctx-1, cache row 0).
func attnTail(r *rand.Rand, T, ctx int) *rcall {
	c := attnCall(r, 1, 12, 12, 64, 16, ctx)
	rows, pos := make([]int32, T), make([]int32, T)
	for t := range pos {
		pos[t] = int32(ctx - T + t)
	}
	c.o[0] = operand{b: make([]byte, 4*T*12*64), rows: T, cols: 12 * 64, dt: accel.F32}
	c.o[1] = operand{b: accel.F32Bytes(normF32(r, T*12*64)), rows: T, cols: 12 * 64, dt: accel.F32}
	c.o[4] = operand{b: accel.I32Bytes(rows), rows: 1, cols: T, dt: accel.I32}
	c.o[5] = operand{b: accel.I32Bytes(pos), rows: 1, cols: T, dt: accel.I32}
	return c
}

// BenchmarkAttentionHeads times the attention of the 110M shape's head
// layout (12 heads of 64, no grouping), split between two workers' halves,
// plain Go against the vector kernels (the general path: scores, softmax,
// weighted values): one token at context 512 (decode), and the 512 tokens
// of one sequence's prefill (token t attends to positions 0..t).
func BenchmarkAttentionHeads(b *testing.B) {
	for _, prefill := range []bool{false, true} {
		const ctx = 512
		T, scores := 1, ctx
		name := "decode/ctx512"
		r := rand.New(rand.NewPCG(1, 2))
		if prefill {
			T, scores, name = ctx, ctx*(ctx+1)/2, "prefill/T512"
		}
		c := attnTail(r, T, ctx)
		units, _ := unitsAttention(c)
		k := &kctx{}
		for _, on := range []bool{false, true} {
			set := "go"
			if on {
				set = "simd"
			}
			b.Run(name+"/"+set, func(b *testing.B) {
				benchVec(b, on, func() {
					runAttention(c, 0, units/2, k)
					runAttention(c, units/2, units, k)
				})
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(scores*12), "ns/score")
			})
		}
	}
}

// BenchmarkReadBandwidth reports the memory read bandwidth, plain Go and
// vector sums, one and two threads.
func BenchmarkReadBandwidth(b *testing.B) {
	for _, on := range []bool{false, true} {
		for _, th := range []int{1, 2} {
			name := "go"
			if on {
				name = "simd"
			}
			b.Run(fmt.Sprintf("%s/t%d", name, th), func(b *testing.B) {
				var bw float64
				benchVec(b, on, func() { bw = ReadBandwidth(th) })
				b.ReportMetric(bw/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkSiLUBands: the stories260K decode step's SiLUMul at batch 64 (64
// rows of 172), one worker's bands.
func BenchmarkSiLUBands(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const T, h = 64, 172
	mk := func() operand {
		v := make([]float32, T*h)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return operand{b: unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)), rows: T, cols: h, dt: accel.F32}
	}
	c := &rcall{op: accel.OpSiLUMul}
	c.o[0], c.o[1], c.o[2] = mk(), mk(), mk()
	n, _ := unitsElem(8)(c)
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprint(on), func(b *testing.B) {
			benchVec(b, on, func() { runSiLUMul(c, 0, n/2, nil) })
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*T*h/2), "ns/elem")
		})
	}
}

func BenchmarkExpShift(b *testing.B) {
	if vecBuilt == nil {
		b.Skip("no vector kernels")
	}
	for _, n := range []int{64, 512} {
		x := make([]float32, n)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range x {
			x[i] = float32(r.NormFloat64() * 3)
		}
		y := make([]float32, n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				copy(y, x)
				vecBuilt.expShift(y, 4)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/elem")
		})
	}
}
