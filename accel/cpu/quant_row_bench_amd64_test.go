//go:build goexperiment.simd && amd64

package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkQuantMatMulRow times the one-row quantized kernels (batch-1
// decode) over a whole matrix on one thread, x's quantization left out:
// 512x512 (the 25M shape's attention, 0.1-0.3 MB packed) stays in L2,
// 512x1376 (its feed-forward), 768x2048 and 2048x768 in L2/L3 between
// runs, 2048x32000 (a 1B
// classifier, 39-74 MB packed) streams from memory. wGB/s is the packed
// weights' bytes per second of the fastest run (steadier than the mean on
// a shared machine).
// `GOEXPERIMENT=simd go test -run XXX -bench QuantMatMulRow ./accel/cpu`
func BenchmarkQuantMatMulRow(b *testing.B) {
	if !quantVecBuilt {
		b.Skip("no quantized vector kernels here")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, sh := range [][2]int{{512, 512}, {512, 1376}, {768, 2048}, {2048, 768}, {2048, 32000}} {
		for _, dt := range quantDTypes {
			in, out := sh[0], sh[1]
			c, _, _ := quantCall(b, r, dt, 1, out, in)
			p := packWeights(c.o[2])
			eachQuantSet(b, fmt.Sprintf("%s/%dx%d", dt, in, out), func(b *testing.B) {
				timeRowPasses(b, c, []*packed{p})
			})
		}
	}
}

// BenchmarkQuantMatMulRowSet times the one-row kernels over a working set of
// n packed copies of one 512x1376 matrix (the 25M shape's w1 and w3), one
// after another as a decode step reads its matrices, on one thread: wGB/s
// is the packed bytes per second of the fastest pass over the set, min-µs
// its time per matrix. Where the set outgrows what the last-level cache
// holds for this process (on a shared machine less than its size) the rate
// falls from the kernels' own to the memory's.
// `GOEXPERIMENT=simd go test -run XXX -bench QuantMatMulRowSet ./accel/cpu`
func BenchmarkQuantMatMulRowSet(b *testing.B) {
	if !quantVecBuilt {
		b.Skip("no quantized vector kernels here")
	}
	r := rand.New(rand.NewPCG(1, 2))
	const in, out = 512, 1376
	for _, dt := range quantDTypes[:3] {
		c, _, _ := quantCall(b, r, dt, 1, out, in)
		p := packWeights(c.o[2])
		for _, n := range []int{1, 8, 16, 24, 32, 48} {
			ps := packCopies(p, n)
			eachQuantSet(b, fmt.Sprintf("%s/%dx%d/n%d", dt, in, out, n), func(b *testing.B) {
				timeRowPasses(b, c, ps)
			})
		}
	}
}

// eachQuantSet runs f as sub-benchmark name/<set> with each kernel set
// this CPU runs in use, one after the other (so that the sets' figures for
// one case come from the same minute of a shared machine): the avx512
// set's own quantized kernels where it has them, else the AVX2 ones.
func eachQuantSet(b *testing.B, name string, f func(b *testing.B)) {
	for _, vk := range vecSets() {
		b.Run(name+"/"+vk.name, func(b *testing.B) {
			old := vec.Load()
			defer vec.Store(old)
			vec.Store(vk)
			f(b)
		})
	}
}

// packCopies is p and n-1 copies of it, each in its own memory.
func packCopies(p *packed, n int) []*packed {
	ps := []*packed{p}
	for len(ps) < n {
		q := *p
		q.data = alignedBytes(len(p.data))
		copy(q.data, p.data)
		ps = append(ps, &q)
	}
	return ps
}

// BenchmarkQuantRowsSet times the many-row kernels as one worker's part of
// a 64-sequence decode step runs them: 32 rows of x (already quantized) by a
// 768x2048 matrix, over a working set of n packed copies of it one after
// another, on one thread. At n 1 the matrix (1.6 MB of Q8_0) stays in L2/L3
// between passes; 16 copies (27 MB) are about this machine's 32 MB L3, 64
// (107 MB) stream from memory as the 110M model's 205 MB do every step.
// GMAC/cpu-s as in BenchmarkQuantRows: where it falls with n, the kernels
// in the step wait for the weights rather than computing.
// `GOEXPERIMENT=simd go test -run XXX -bench QuantRowsSet ./accel/cpu`
func BenchmarkQuantRowsSet(b *testing.B) {
	if !quantVecBuilt {
		b.Skip("no quantized vector kernels here")
	}
	r := rand.New(rand.NewPCG(5, 6))
	const T, out, in = 32, 2048, 768
	for _, dt := range quantDTypes[:2] {
		c, _, _ := quantCall(b, r, dt, T, out, in)
		p := packWeights(c.o[2])
		k := &kctx{}
		quantizeActs(&k.qa, c.o[1].f32(), in, 0, T, kBlocks(dt))
		for _, n := range []int{1, 16, 64} {
			ps := packCopies(p, n)
			eachQuantSet(b, fmt.Sprintf("%s/n%d", dt, n), func(b *testing.B) {
				cpu0 := processCPU()
				for i := 0; i < b.N; i++ {
					runMatMulQuantVec(c, &k.qa, ps[i%n], 0, out/panelWidth, 0, T, k)
				}
				if c := processCPU() - cpu0; c > 0 {
					b.ReportMetric(float64(T*in*out)*float64(b.N)/c.Seconds()/1e9, "GMAC/cpu-s")
				}
			})
		}
	}
}

// timeRowPasses times passes of the one-row kernels over ps (packs of c's
// W, one row of x) and reports the packed bytes per second of the fastest
// pass and its time per matrix.
func timeRowPasses(b *testing.B, c *rcall, ps []*packed) {
	in, out := c.o[1].cols, c.o[0].cols
	k := &kctx{}
	quantizeActs(&k.qa, c.o[1].f32(), in, 0, 1, kBlocks(c.o[2].dt))
	units := (out + panelWidth - 1) / panelWidth
	best := time.Duration(1<<63 - 1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		for _, p := range ps {
			runMatMulQuantVec(c, &k.qa, p, 0, units, 0, 1, k)
		}
		best = min(best, time.Since(t0))
	}
	n := len(ps)
	b.ReportMetric(float64(n*len(ps[0].data))/best.Seconds()/1e9, "wGB/s")
	b.ReportMetric(float64(best.Nanoseconds())/1e3/float64(n), "min-µs")
}
