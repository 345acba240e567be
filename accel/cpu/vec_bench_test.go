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
	n := 64
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 3)
	}
	for _, on := range []bool{false, true} {
		name := "go"
		if on {
			name = "simd"
		}
		b.Run(name, func(b *testing.B) {
			benchVec(b, on, func() {
				copy(y, x)
				softmax32(y)
			})
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/elem")
		})
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
