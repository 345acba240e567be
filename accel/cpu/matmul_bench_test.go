package cpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// BenchmarkMatMulKernel times the packed matmul kernels on one thread, per
// kernel set this CPU runs and register block, for the 25M model's shapes
// and one that stays in L1 (in x out) at T rows (at T1 only the blocks of
// one row), with the plain-Go row-major kernel (the device's kernel
// without vector kernels) as "go", and the benchmarks' extra sets
// (benchExtraSets: the kernels the assembly replaced): GFLOP/s counts a
// multiply and an add per weight and row.
func BenchmarkMatMulKernel(b *testing.B) {
	sets := vecSets()
	if len(sets) == 0 {
		b.Skip("no vector kernels in this build or on this CPU")
	}
	old := vec.Load()
	defer vec.Store(old)
	r := rand.New(rand.NewPCG(1, 2))
	var cpu0 time.Duration
	gflops := func(b *testing.B, T, in, out int) {
		f := 2 * float64(T*in*out) * float64(b.N) / 1e9
		b.ReportMetric(f/b.Elapsed().Seconds(), "GFLOP/s")
		if c := processCPU() - cpu0; c > 0 {
			b.ReportMetric(f/c.Seconds(), "cpu-GFLOP/s")
		}
	}
	// 64x48: the weights (12 KiB) stay in L1, which shows the kernels'
	// own ceiling.
	for _, sh := range [][2]int{{64, 48}, {512, 512}, {512, 1376}, {1376, 512}, {768, 2048}, {2048, 768}} {
		for _, T := range []int{1, 64, 512} {
			for _, dt := range []accel.DType{accel.F32, accel.BF16} {
				in, out := sh[0], sh[1]
				c := benchMatCall(r, dt, T, out, in)
				b.Run(fmt.Sprintf("go/%s/%dx%d/T%d", dt, in, out, T), func(b *testing.B) {
					vec.Store(nil)
					n, _ := unitsMatMul(c)
					b.ResetTimer()
					cpu0 = processCPU()
					for i := 0; i < b.N; i++ {
						p0, p1, t0, t1 := matUnits(c, 0, n)
						runMatMulRows(c, p0, p1, t0, t1)
					}
					gflops(b, T, in, out)
				})
				p := packWeights(c.o[2])
				k := &kctx{}
				for _, set := range append(sets, benchExtraSets()...) {
					ks := &set.f32
					if dt == accel.BF16 {
						ks = &set.bf16
					}
					for _, blk := range benchBlocks {
						if ks[blk[0]-1][blk[1]-1] == nil || blk[0] > T {
							continue
						}
						b.Run(fmt.Sprintf("%s/%s/%dx%d/T%d/R%dP%d", set.name, dt, in, out, T, blk[0], blk[1]), func(b *testing.B) {
							ops := *set
							ops.blocks.f32, ops.blocks.bf16 = blk, blk
							if blk[0] == 1 { // the block of one row of x (T1)
								ops.blocks.f32Row, ops.blocks.bf16Row = blk, blk
							}
							vec.Store(&ops)
							b.ResetTimer()
							cpu0 = processCPU()
							for i := 0; i < b.N; i++ {
								runMatMulPacked(c, p, 0, p.panels, 0, T, k)
							}
							gflops(b, T, in, out)
						})
					}
				}
			}
		}
	}
}

// benchBlocks are the register blocks BenchmarkMatMulKernel times, where a
// set has them.
var benchBlocks = [][2]int{
	{3, 2}, {2, 3}, {2, 2}, {3, 1}, {2, 1}, {1, 4},
	{4, 3}, {3, 4}, {4, 4}, {6, 2}, {8, 2}, {6, 3}, {8, 3}, {4, 5}, {5, 4}, {4, 6}, {6, 4}, {5, 5}, {7, 4}, {4, 7},
	{2, 4}, {2, 6}, {2, 8}, {3, 6}, {3, 8},
	{1, 6}, {1, 8},
}

// benchMatCall is matCall on normal numbers: subnormal products take a
// slow path in the multipliers of some CPUs, the scalar and the vector ones
// alike, and would time that.
func benchMatCall(r *rand.Rand, dt accel.DType, T, out, in int) *rcall {
	c := matCall(r, dt, T, out, in)
	copy(c.o[1].f32(), acceltest.Rand(r, T*in, 1))
	if w := acceltest.Rand(r, out*in, 0.3); dt == accel.BF16 {
		c.o[2].b = bf16Bytes(w)
	} else {
		c.o[2].b = accel.F32Bytes(w)
	}
	return c
}

// BenchmarkPrefillMatMuls times the matmuls of one 25M-model layer at
// T = 512 tokens (q, k, v, o: 512x512; w1, w3: 512x1376; w2: 1376x512),
// launched on the device as a replayed graph over every thread: the
// 512-token prefill's matmul throughput, on the plain-Go kernels ("go") and
// on each vector kernel set this CPU runs, and on the benchmarks' extra
// sets (benchExtraSets). REPRISE_BENCH_F32_BLOCK=RxP adds the device's set
// on float32 block R x P, to choose the sets' blocks by.
func BenchmarkPrefillMatMuls(b *testing.B) {
	sets := append(append([]*vecOps{nil}, vecSets()...), benchExtraSets()...)
	if blk := os.Getenv("REPRISE_BENCH_F32_BLOCK"); blk != "" {
		// A block to try on the first set (RxP), for choosing the sets' blocks.
		var b2 [2]int
		if _, err := fmt.Sscanf(blk, "%dx%d", &b2[0], &b2[1]); err != nil || vecBuilt == nil {
			b.Fatalf("REPRISE_BENCH_F32_BLOCK=%q: %v", blk, err)
		}
		v := *vecBuilt
		v.name += "-" + blk
		v.blocks.f32 = b2
		sets = append(sets, &v)
	}
	for _, dt := range []accel.DType{accel.F32, accel.BF16} {
		for _, set := range sets {
			name := "go"
			if set != nil {
				name = set.name
			}
			b.Run(dt.String()+"/"+name, func(b *testing.B) {
				old := vec.Load()
				defer vec.Store(old)
				vec.Store(set)
				r := rand.New(rand.NewPCG(3, 4))
				e := acceltest.Open(b, "cpu", accel.Options{})
				const T, d, h = 512, 512, 1376
				up := func(rows, cols int) accel.Tensor {
					v := acceltest.Rand(r, rows*cols, 0.05)
					if dt == accel.F32 {
						return e.F32(v, rows, cols)
					}
					data := bf16Bytes(v)
					buf, err := e.Dev.Alloc(int64(len(data)))
					if err != nil {
						b.Fatal(err)
					}
					if err := accel.Upload(e.S, buf, data); err != nil {
						b.Fatal(err)
					}
					return accel.Tensor{Buf: buf, DType: dt, Rows: rows, Cols: cols}
				}
				x := e.F32(acceltest.Rand(r, T*d, 1), T, d)
				hx := e.F32(acceltest.Rand(r, T*h, 1), T, h)
				ws := []accel.Tensor{up(d, d), up(d, d), up(d, d), up(d, d), up(h, d), up(h, d), up(d, h)}
				ys := []accel.Tensor{e.Zeros(accel.F32, T, d), e.Zeros(accel.F32, T, h)}
				flops := 0.0
				run := func(l *accel.Launcher) {
					for i, w := range ws {
						if i < 4 {
							l.MatMul(ys[0], x, w)
						} else if i < 6 {
							l.MatMul(ys[1], x, w)
						} else {
							l.MatMul(ys[0], hx, w)
						}
					}
				}
				for _, w := range ws {
					flops += 2 * float64(T*w.Rows*w.Cols)
				}
				pool, _ := e.Dev.NewPool()
				g, err := accel.Capture(e.S, pool, func() error { l := accel.On(e.S); run(l); return l.Err() })
				if err != nil {
					b.Fatal(err)
				}
				ex, err := g.Instantiate()
				if err != nil {
					b.Fatal(err)
				}
				_ = ex.Launch(e.S)
				_ = e.S.Synchronize()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					_ = ex.Launch(e.S)
					_ = e.S.Synchronize()
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkMatMulFloor runs the matmuls of one stories260K decode step at
// batch 64 (per layer q, k, v, o, w1, w3, w2; then the classifier) on one
// thread with the packed vector kernels, back to back and out of any
// schedule: the step's arithmetic at the kernels' own rate. Half of
// µs/step (two cores, perfect split) is a floor under the batch-64 replayed
// step that no scheduling can beat; 64 × the batch-1 replayed step
// (BenchmarkStep) over it bounds the aggregate speed-up batching can give.
func BenchmarkMatMulFloor(b *testing.B) {
	useBuiltMM(b)
	r := rand.New(rand.NewPCG(5, 6))
	sh := shapeStories
	const T = 64
	type mm struct {
		c *rcall
		p *packed
	}
	var mms []mm
	add := func(in, out int) {
		c := matCall(r, accel.F32, T, out, in)
		mms = append(mms, mm{c, packWeights(c.o[2])})
	}
	for range sh.layers {
		add(sh.dim, sh.dim)
		add(sh.dim, sh.kvHeads*sh.dim/sh.heads)
		add(sh.dim, sh.kvHeads*sh.dim/sh.heads)
		add(sh.dim, sh.dim)
		add(sh.dim, sh.hidden)
		add(sh.dim, sh.hidden)
		add(sh.hidden, sh.dim)
	}
	add(sh.dim, sh.vocab)
	flops := 0.0
	for _, m := range mms {
		flops += 2 * float64(T*m.c.o[2].rows*m.c.o[2].cols)
	}
	k := &kctx{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, m := range mms {
			runMatMulPacked(m.c, m.p, 0, m.p.panels, 0, T, k)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(sec*1e6, "µs/step")
	b.ReportMetric(sec*1e6/2, "µs/step-2cores")
	b.ReportMetric(flops/sec/1e9, "GFLOP/s")
}

// BenchmarkMatMulCold times the packed float32 kernels at 64 rows (a
// batch's decode step) on the 110M model's 768x2048 matmul, one thread,
// with weights that come from memory: a ring of packed copies larger than
// the last-level cache, one per run ("cold"), against one copy read over
// and over ("warm"). The gap is what a group's first block of rows waits
// on memory, which runMatMulPacked's prefetch (mmKernel's pf) hides.
func BenchmarkMatMulCold(b *testing.B) {
	useBuiltMM(b)
	r := rand.New(rand.NewPCG(7, 8))
	const T, in, out = 64, 768, 2048
	c := benchMatCall(r, accel.F32, T, out, in)
	// 1.5x the last-level cache (64 MiB where unknown), at most 2 GiB.
	ring := int64(64 << 20)
	if llc := LastLevelCache(); llc > 0 {
		ring = llc + llc/2
	}
	n := int(min(ring, 2<<30) / int64(4*in*out))
	for _, tc := range []struct {
		name   string
		copies int
	}{{"warm", 1}, {"cold", max(n, 2)}} {
		b.Run(tc.name, func(b *testing.B) {
			ps := make([]*packed, tc.copies)
			for i := range ps {
				ps[i] = packWeights(c.o[2])
			}
			k := &kctx{}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := ps[i%len(ps)]
				runMatMulPacked(c, p, 0, p.panels, 0, T, k)
			}
			b.ReportMetric(2*float64(T*in*out)*float64(b.N)/1e9/b.Elapsed().Seconds(), "GFLOP/s")
		})
	}
}

// useBuiltMM runs the benchmark on this build's fastest vector set, the
// set before it restored at its end, or skips it where no set has packed
// matmul kernels.
func useBuiltMM(b *testing.B) {
	b.Helper()
	if !vecBuilt.hasMM() {
		b.Skip("no vector matmul kernels in this build or on this CPU")
	}
	old := vec.Load()
	vec.Store(vecBuilt)
	b.Cleanup(func() { vec.Store(old) })
}
