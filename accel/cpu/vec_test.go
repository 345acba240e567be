package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// The vector kernels against the scalar ones, on the same inputs in one
// binary: the same bits, always. These run where the build has the archsimd
// kernels and the CPU runs them (GOEXPERIMENT=simd on an AVX-512 or AVX2
// machine), each set this CPU runs in turn (an AVX-512 machine runs the
// AVX2 set too); elsewhere they skip, and TestModesAgree still checks the
// plain-Go kernels on packed weights against the row-major ones.

func needVec(t *testing.T) *vecOps {
	t.Helper()
	if vecBuilt == nil || goamd64v3 {
		t.Skip("no archsimd kernels in this build or on this CPU (GOEXPERIMENT=simd, amd64, AVX-512 or AVX2+FMA)")
	}
	return vecBuilt
}

// eachVecSet runs f on every vector set this CPU runs, as subtests.
func eachVecSet(t *testing.T, f func(t *testing.T, vk *vecOps)) {
	t.Helper()
	needVec(t)
	for _, vk := range vecSets() {
		t.Run(vk.name, func(t *testing.T) { f(t, vk) })
	}
}

// expInputs are float32s to test exponentials on: every range the kernels
// treat differently, the boundaries, special values and random bits.
func expInputs(r *rand.Rand) []float32 {
	var v []float32
	for _, x := range []float64{0, -1, 1, -87, -87.000001, -86.99999, 88, 88.0001, 87.9999, -88, -89, -103, -104,
		-150, 89, 100, 1e-30, -1e-30, 1e-45, -1e-45, 0.5, -0.5, math.Ln2, -math.Ln2, 0.34657, -0.34657} {
		v = append(v, float32(x), math.Nextafter32(float32(x), 1000), math.Nextafter32(float32(x), -1000))
	}
	v = append(v, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), float32(math.Copysign(0, -1)))
	for i := 0; i < 200000; i++ {
		switch i % 4 {
		case 0:
			v = append(v, float32(r.NormFloat64()*4))
		case 1:
			v = append(v, float32(r.Float64()*200-110))
		case 2:
			v = append(v, math.Float32frombits(r.Uint32()))
		default:
			v = append(v, -float32(r.ExpFloat64()*10))
		}
	}
	return v
}

func sameBits32(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

func TestVecExp(t *testing.T) { eachVecSet(t, testVecExp) }

func testVecExp(t *testing.T, vk *vecOps) {
	r := rand.New(rand.NewPCG(3, 4))
	in := expInputs(r)
	for _, m := range []float32{0, 1.5, -3, 20} {
		for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 24, 64, 513, len(in)} {
			x := append([]float32(nil), in[:n]...)
			vk.expShift(x, m)
			for i, v := range in[:n] {
				if want := exp32(v - m); !sameBits32(x[i], want) {
					t.Fatalf("exp(%v - %v) = %v (%08x), want %v (%08x)", v, m, x[i], math.Float32bits(x[i]), want, math.Float32bits(want))
				}
			}
		}
	}
}

func TestVecSiLU(t *testing.T) { eachVecSet(t, testVecSiLU) }

func testVecSiLU(t *testing.T, vk *vecOps) {
	r := rand.New(rand.NewPCG(5, 6))
	a := expInputs(r)
	b := make([]float32, len(a))
	for i := range b {
		b[i] = float32(r.NormFloat64())
	}
	for _, n := range []int{1, 5, 8, 9, 16, 31, 100, len(a)} {
		want := make([]float32, n)
		siluMulGo(want, a[:n], b[:n])
		got := make([]float32, n)
		vk.silu(got, a[:n], b[:n])
		// in place, over a and over b
		ga := append([]float32(nil), a[:n]...)
		vk.silu(ga, ga, b[:n])
		gb := append([]float32(nil), b[:n]...)
		vk.silu(gb, a[:n], gb)
		for i := range want {
			for _, g := range [][]float32{got, ga, gb} {
				if !sameBits32(g[i], want[i]) {
					t.Fatalf("n=%d silu(%v)*%v = %v, want %v", n, a[i], b[i], g[i], want[i])
				}
			}
		}
	}
}

// TestVecExpExhaustive checks every float32 (REPRISE_EXHAUSTIVE=1; about a
// minute on two cores per set).
func TestVecExpExhaustive(t *testing.T) {
	needVec(t)
	if os.Getenv("REPRISE_EXHAUSTIVE") != "1" {
		t.Skip("set REPRISE_EXHAUSTIVE=1 to check all 2^32 inputs")
	}
	eachVecSet(t, testVecExpExhaustive)
}

func testVecExpExhaustive(t *testing.T, vk *vecOps) {
	const chunk = 1 << 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []uint32
	workers := runtime.GOMAXPROCS(0)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			x := make([]float32, chunk)
			for base := uint64(w) * chunk; base < 1<<32; base += uint64(workers) * chunk {
				for i := range x {
					x[i] = math.Float32frombits(uint32(base) + uint32(i))
				}
				vk.expShift(x, 0)
				for i := range x {
					u := uint32(base) + uint32(i)
					if !sameBits32(x[i], exp32(math.Float32frombits(u))) {
						mu.Lock()
						bad = append(bad, u)
						mu.Unlock()
					}
				}
			}
		}(w)
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d inputs differ, first %08x", len(bad), bad[0])
	}
}

// specialF32 mixes normals with zeros of both signs, subnormals and large
// values.
func specialF32(r *rand.Rand, n int, sd float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch r.IntN(16) {
		case 0:
			v[i] = float32(math.Copysign(0, -1))
		case 1:
			v[i] = 0
		case 2:
			v[i] = math.Float32frombits(r.Uint32() & 0x807fffff) // subnormal
		case 3:
			v[i] = float32(r.NormFloat64() * 1e30)
		default:
			v[i] = float32(r.NormFloat64() * sd)
		}
	}
	return v
}

// TestVecMatMul: the packed vector kernels of every set this CPU runs
// (AVX-512, AVX2), on the set's own register blocks and on every other
// block, against the row-major scalar kernel and the plain-Go panel kernel,
// over shapes that exercise every block, the partial last panel and odd
// input counts.
func TestVecMatMul(t *testing.T) {
	sets := vecSets()
	if len(sets) == 0 {
		t.Skip("no archsimd kernels in this build or on this CPU (GOEXPERIMENT=simd, amd64, AVX2 or AVX-512)")
	}
	old := vec.Load()
	defer vec.Store(old)
	r := rand.New(rand.NewPCG(7, 8))
	for _, dt := range []accel.DType{accel.F32, accel.BF16} {
		for _, T := range []int{1, 2, 3, 4, 5, 7, 9, 17, 64} {
			for _, out := range []int{1, 15, 16, 17, 48, 64, 100, 130, 257} {
				for _, in := range []int{1, 2, 3, 7, 64, 65} {
					c := matCall(r, dt, T, out, in)
					want := runRef(c, func(c *rcall, lo, hi int) { p0, p1, t0, t1 := matUnits(c, lo, hi); runMatMulRows(c, p0, p1, t0, t1) })
					p := packWeights(c.o[2])
					k := &kctx{}
					gotGo := runRef(c, func(c *rcall, lo, hi int) {
						p0, p1, t0, t1 := matUnits(c, lo, hi)
						runMatMulPackedGo(c, p, p0, p1, t0, t1)
					})
					for _, set := range sets {
						for _, blk := range append([][2]int{{0, 0}}, tableBlocks(set, dt)...) {
							if blk[0] > T {
								continue
							}
							ops := *set
							if blk[0] > 0 { // {0, 0}: the set's own blocks
								ops.blocks = mmBlocks{f32: blk, bf16: blk, f32Row: [2]int{1, blk[1]}, bf16Row: [2]int{1, blk[1]}}
							}
							vec.Store(&ops)
							gotVec := runRef(c, func(c *rcall, lo, hi int) {
								p0, p1, t0, t1 := matUnits(c, lo, hi)
								runMatMulPacked(c, p, p0, p1, t0, t1, k)
							})
							for i := range want {
								if !sameBits32(gotVec[i], want[i]) || !sameBits32(gotGo[i], want[i]) {
									t.Fatalf("%s/%s/T%d/out%d/in%d/R%dP%d: y[%d] vector %v, panel Go %v, row-major %v",
										set.name, dt, T, out, in, blk[0], blk[1], i, gotVec[i], gotGo[i], want[i])
								}
							}
						}
					}
				}
			}
		}
	}
}

// matCall is a MatMul call on host memory.
func matCall(r *rand.Rand, dt accel.DType, T, out, in int) *rcall {
	x := specialF32(r, T*in, 1)
	w := specialF32(r, out*in, 0.3)
	c := &rcall{op: accel.OpMatMul}
	c.o[0] = operand{b: make([]byte, 4*T*out), rows: T, cols: out, dt: accel.F32}
	c.o[1] = operand{b: accel.F32Bytes(x), rows: T, cols: in, dt: accel.F32}
	if dt == accel.BF16 {
		c.o[2] = operand{b: bf16Bytes(w), rows: out, cols: in, dt: accel.BF16}
	} else {
		c.o[2] = operand{b: accel.F32Bytes(w), rows: out, cols: in, dt: accel.F32}
	}
	return c
}

// runRef runs a matmul kernel over all its units, in two pieces, and
// returns y.
func runRef(c *rcall, run func(c *rcall, lo, hi int)) []float32 {
	y := c.o[0].f32()
	for i := range y {
		y[i] = float32(math.NaN())
	}
	n, _ := unitsMatMul(c)
	run(c, 0, n/2)
	run(c, n/2, n)
	return append([]float32(nil), y...)
}

// TestKernelSet: the vector kernels run exactly where they are built and the
// CPU has AVX-512 or AVX2 with FMA, and never in a GOAMD64=v3 (or higher) build.
func TestKernelSet(t *testing.T) {
	t.Logf("kernel set %q (vector kernels built for this CPU: %v, GOAMD64>=v3: %v)", KernelSet(), SIMDBuilt(), goamd64v3)
	if goamd64v3 && (SIMDBuilt() || KernelSet() != "go") {
		t.Fatal("vector kernels on in a GOAMD64=v3 build")
	}
	if os.Getenv(EnvSIMD) == "0" && KernelSet() != "go" {
		t.Fatalf("%s=0 but the kernel set is %q", EnvSIMD, KernelSet())
	}
	if env := os.Getenv(EnvSIMD); SIMDBuilt() && env != "0" {
		// The set the variable names where this CPU runs it, else the
		// fastest.
		want := vecSets()[0].name
		for _, vk := range vecSets() {
			if vk.name == env {
				want = env
			}
		}
		if KernelSet() != want {
			t.Fatalf("%s=%q: kernel set %q, but this CPU runs %q", EnvSIMD, env, KernelSet(), want)
		}
	}
}

// vecSizes are lengths around the vector widths (8 and 16 lanes) and the
// exponential kernels' block (expBlock).
var vecSizes = []int{1, 2, 3, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 63, 64, 65, 100, 511, 512, 513, 1030}

// TestVecElementwise: scale, division, maximum, the exponential with a
// sixteen-lane pattern of shifts, the four-row sums and the bandwidth
// probe's sum of every vector set against the plain-Go code, at every
// length around the vector widths, on inputs with zeros of both signs,
// subnormals, infinities and NaNs.
func TestVecElementwise(t *testing.T) { eachVecSet(t, testVecElementwise) }

func testVecElementwise(t *testing.T, vk *vecOps) {
	r := rand.New(rand.NewPCG(9, 10))
	special := func(n int) []float32 {
		v := specialF32(r, n, 3)
		for i := range v {
			switch r.IntN(40) {
			case 0:
				v[i] = float32(math.Inf(1))
			case 1:
				v[i] = float32(math.Inf(-1))
			case 2:
				v[i] = float32(math.NaN())
			}
		}
		return v
	}
	check := func(op string, n, i int, got, want float32) {
		t.Helper()
		if !sameBits32(got, want) {
			t.Fatalf("%s n=%d: [%d] = %v (%08x), plain Go %v (%08x)", op, n, i, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
	for _, n := range vecSizes {
		x, w := special(n), special(n)
		for _, s := range []float32{0.37, 0, float32(math.Inf(1)), 3e38} {
			want := make([]float32, n)
			rmsScaleGo(want, x, w, s)
			got := make([]float32, n)
			vk.scale(got, x, w, s)
			in := append([]float32(nil), x...)
			vk.scale(in, in, w, s) // in place, as RMSNorm may run it
			for i := range want {
				check("scale", n, i, got[i], want[i])
				check("scale in place", n, i, in[i], want[i])
			}
			got = append(got[:0], x...)
			vk.div(got, s)
			for i := range got {
				check("div", n, i, got[i], x[i]/s)
			}
		}

		// The maximum: of finite values with zeros of both signs, of all
		// -Inf, and false with a NaN anywhere (the caller's scalar loop
		// then decides).
		fin := specialF32(r, n, 3)
		m, ok := vk.max(fin)
		want := fin[0]
		for _, v := range fin[1:] {
			if v > want {
				want = v
			}
		}
		if !ok || m != want {
			t.Fatalf("max n=%d = %v, %v; want %v", n, m, ok, want)
		}
		inf := make([]float32, n)
		for i := range inf {
			inf[i] = float32(math.Inf(-1))
		}
		if m, ok := vk.max(inf); !ok || !math.IsInf(float64(m), -1) {
			t.Fatalf("max of -Inf n=%d = %v, %v", n, m, ok)
		}
		for _, at := range []int{0, n / 2, n - 1} {
			nan := append([]float32(nil), fin...)
			nan[at] = float32(math.NaN())
			if _, ok := vk.max(nan); ok {
				t.Fatalf("max n=%d with a NaN at %d: ok", n, at)
			}
		}

		// The exponential with a pattern of sixteen shifts (the attention's
		// per-head rows).
		var pat [16]float32
		for i := range pat {
			pat[i] = float32(r.NormFloat64() * 4)
		}
		e := append([]float32(nil), x...)
		expShiftPattern(e, &pat, vk.name == "avx512")
		for i, v := range x {
			check("exp pattern", n, i, e[i], exp32(v-pat[i%16]))
		}

		// Four rows' sums, each in element order, at every length up to n.
		var rows [4][]float32
		for i := range rows {
			rows[i] = special(n)
		}
		for _, k := range []int{0, 1, 3, 4, 5, n} {
			if k > n {
				continue
			}
			var sums [4]float32
			vk.rowSums4(&rows, k, &sums)
			for i, row := range rows {
				var s float32
				for _, v := range row[:k] {
					s += v
				}
				check("rowSums4", k, i, sums[i], s)
			}
		}

		// The bandwidth probe's sum is in no particular order: exact on
		// small integers.
		ints := make([]float32, n)
		var s float32
		for i := range ints {
			ints[i] = float32(r.IntN(200) - 100)
			s += ints[i]
		}
		check("sum", n, 0, vk.sum(ints), s)
	}
}

// TestVecAttention: the attention (scores, softmax, weighted values) on
// every vector set against the plain-Go kernels, for head sizes that take
// each of the value kernels' widths and the scores' tails, grouped query
// heads, a paged cache and splits between workers; with huge queries
// (scores of ±Inf) and a NaN.
func TestVecAttention(t *testing.T) { eachVecSet(t, testVecAttention) }

func testVecAttention(t *testing.T, vk *vecOps) {
	general := *vk
	general.attn8 = nil
	for _, tc := range []struct{ T, nh, nkv, hd, page, ctx int }{
		{1, 4, 4, 64, 16, 1}, {2, 4, 2, 64, 16, 37}, {3, 6, 2, 64, 8, 130}, {2, 2, 1, 128, 16, 20},
		{2, 4, 4, 8, 16, 9}, {2, 2, 2, 16, 16, 17}, {2, 2, 1, 24, 16, 23}, {3, 2, 2, 40, 16, 31},
		{2, 2, 2, 72, 32, 64}, {1, 2, 2, 96, 16, 7}, {2, 2, 1, 12, 16, 19},
	} {
		for _, special := range []string{"", "big", "nan"} {
			name := fmt.Sprintf("T%d/h%d/kv%d/hd%d/ctx%d/%s", tc.T, tc.nh, tc.nkv, tc.hd, tc.ctx, special)
			r := rand.New(rand.NewPCG(uint64(tc.hd*1000+tc.ctx), uint64(len(special))))
			c := attnCall(r, tc.T, tc.nh, tc.nkv, tc.hd, tc.page, tc.ctx)
			q := c.o[1].f32()
			spoilQueries(q, special, len(q)-3)
			units, _ := unitsAttention(c)
			want := runAttnPieces(c, nil, []int{0, units})
			for _, cuts := range [][]int{{0, units}, {0, units / 2, units}} {
				sameAttnBits(t, fmt.Sprintf("%s, cuts %v", name, cuts), runAttnPieces(c, &general, cuts), want)
			}
		}
	}
}

// TestVecRoPE: each set's rotations of runs of heads give rotateHead's and
// rotateHalves's bits, for head sizes that are and are not whole vectors,
// on special values (zeros of both signs, subnormals, large numbers) at
// the angles of positions near and far.
func TestVecRoPE(t *testing.T) { eachVecSet(t, testVecRoPE) }

func testVecRoPE(t *testing.T, vk *vecOps) {
	if vk.ropePairs == nil || vk.ropeHalves == nil {
		t.Skip("the set has no vector rotations")
	}
	r := rand.New(rand.NewPCG(61, 62))
	for _, hd := range []int{2, 6, 8, 14, 16, 24, 32, 64, 72, 128, 136} {
		pairs := hd / 2
		freq := make([]float32, pairs)
		for i := range freq {
			freq[i] = accel.RoPEFreq(2*i, hd, 10000)
		}
		var a ropeAngles
		a.use(freq, 1)
		for _, p := range []int32{0, 1, 7, 4095, 131071} {
			e := a.angles(0, p, freq)
			for _, heads := range []int{1, 3} {
				v := specialF32(r, heads*hd, 2)
				for _, tc := range []struct {
					name   string
					vec    func(v []float32)
					scalar func(v []float32)
				}{
					{"pairs", func(v []float32) { vk.ropePairs(v, e.cos2, e.sin2) }, func(v []float32) { rotateHead(v, e.cos, e.sin) }},
					{"halves", func(v []float32) { vk.ropeHalves(v, e.cos, e.sin) }, func(v []float32) { rotateHalves(v, e.cos, e.sin) }},
				} {
					got := append([]float32(nil), v...)
					tc.vec(got)
					want := append([]float32(nil), v...)
					for o := 0; o < len(want); o += hd {
						tc.scalar(want[o : o+hd])
					}
					for i := range want {
						if !sameBits32(got[i], want[i]) {
							t.Fatalf("%s hd=%d heads=%d pos=%d: [%d] = %v (%#x), want %v (%#x) from %v",
								tc.name, hd, heads, p, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]), v[i])
						}
					}
				}
			}
		}
	}
}
