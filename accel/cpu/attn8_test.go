package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// attnCall builds an OpAttention call of T tokens over a paged cache whose
// pages are handed out in a shuffled order, with context lengths drawn up to
// maxCtx (the first token's is exactly maxCtx).
func attnCall(r *rand.Rand, T, nh, nkv, hd, page, maxCtx int) *rcall {
	ppr := (maxCtx + page - 1) / page
	npages := T*ppr + 1
	c := attnData(r, T, nh, nkv, hd, page, npages)
	rows, pos := make([]int32, T), make([]int32, T)
	pages := make([]int32, T*ppr)
	perm := r.Perm(npages - 1)
	for t := range T {
		rows[t] = int32(t)
		pos[t] = int32(maxCtx - 1)
		if t > 0 {
			pos[t] = int32(r.IntN(maxCtx))
		}
		for p := range ppr {
			pages[t*ppr+p] = int32(perm[t*ppr+p] + 1)
		}
	}
	c.o[4] = operand{b: accel.I32Bytes(rows), rows: 1, cols: T, dt: accel.I32}
	c.o[5] = operand{b: accel.I32Bytes(pos), rows: 1, cols: T, dt: accel.I32}
	c.o[6] = operand{b: accel.I32Bytes(pages), rows: T, cols: ppr, dt: accel.I32}
	return c
}

// attnData is an attention call's output, queries (T rows of nh heads of
// hd) and KV cache (npages pages of page slots, nkv heads), random.
func attnData(r *rand.Rand, T, nh, nkv, hd, page, npages int) *rcall {
	kvd := nkv * hd
	c := &rcall{op: accel.OpAttention, i: [4]int{nh, nkv, hd, page}}
	c.o[0] = operand{b: make([]byte, 4*T*nh*hd), rows: T, cols: nh * hd, dt: accel.F32}
	c.o[1] = operand{b: accel.F32Bytes(normF32(r, T*nh*hd)), rows: T, cols: nh * hd, dt: accel.F32}
	c.o[2] = operand{b: accel.F32Bytes(normF32(r, npages*page*kvd)), rows: npages * page, cols: kvd, dt: accel.F32}
	c.o[3] = operand{b: accel.F32Bytes(normF32(r, npages*page*kvd)), rows: npages * page, cols: kvd, dt: accel.F32}
	return c
}

// sameAttnBits fails t where got and want (attention outputs) differ in
// any bit.
func sameAttnBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if !sameBits32(got[i], want[i]) {
			t.Fatalf("%s: out[%d] = %v (%#x), plain Go %v (%#x)", what, i,
				got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// spoilQueries makes the queries q overflow the scores (special "big") or
// puts a NaN at q[nan] ("nan"); "" leaves them.
func spoilQueries(q []float32, special string, nan int) {
	switch special {
	case "big":
		for i := range q {
			q[i] *= 1e37
		}
	case "nan":
		q[nan] = float32(math.NaN())
	}
}

func normF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// runAttnPieces runs the attention over its units in the given pieces with
// the kernel set vk and returns the output.
func runAttnPieces(c *rcall, vk *vecOps, cuts []int) []float32 {
	old := vec.Load()
	vec.Store(vk)
	defer vec.Store(old)
	out := c.o[0].f32()
	for i := range out {
		out[i] = float32(math.NaN())
	}
	k := &kctx{}
	for i := 0; i+1 < len(cuts); i++ {
		runAttention(c, cuts[i], cuts[i+1], k)
	}
	return append([]float32(nil), out...)
}

// TestAttn8MatchesGeneral: the eight-wide-head attention path gives the
// general path's bits (and the plain-Go kernels'), for whole rows and for
// rows split between workers by KV group, at context lengths around its
// block sizes, including scores that overflow and a NaN query; for a set
// without the path (AVX2), its general path against plain Go.
func TestAttn8MatchesGeneral(t *testing.T) { eachVecSet(t, testAttn8MatchesGeneral) }

func testAttn8MatchesGeneral(t *testing.T, vk *vecOps) {
	general := *vk
	general.attn8 = nil
	sets := map[string]*vecOps{"attn8": vk, "general": &general}
	if vk.attn8 == nil {
		delete(sets, "attn8")
	}
	for _, tc := range []struct {
		T, nh, nkv, page, ctx int
	}{
		{1, 8, 4, 16, 1}, {1, 8, 4, 16, 7}, {3, 8, 4, 16, 16}, {4, 8, 4, 16, 33},
		{5, 8, 4, 8, 64}, {2, 8, 4, 32, 130}, {64, 8, 4, 16, 64}, {2, 4, 2, 16, 41},
		{3, 16, 8, 16, 50}, {2, 8, 8, 16, 20},
	} {
		for _, special := range []string{"", "big", "nan"} {
			name := fmt.Sprintf("T%d/h%d/kv%d/page%d/ctx%d/%s", tc.T, tc.nh, tc.nkv, tc.page, tc.ctx, special)
			t.Run(name, func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(tc.T*1000+tc.ctx), uint64(len(special))))
				c := attnCall(r, tc.T, tc.nh, tc.nkv, 8, tc.page, tc.ctx)
				q := c.o[1].f32()
				spoilQueries(q, special, len(q)-3) // "big": scores of ±Inf
				units, _ := unitsAttention(c)
				// Whole rows on one worker, halves (a KV group each side for
				// 8 heads), and cuts that split groups (the general path).
				splits := [][]int{{0, units}, {0, units / 2, units}, {0, units / 3, 2 * units / 3, units}}
				want := runAttnPieces(c, nil, []int{0, units})
				for _, cuts := range splits {
					for name, set := range sets {
						sameAttnBits(t, fmt.Sprintf("%s, cuts %v", name, cuts), runAttnPieces(c, set, cuts), want)
					}
				}
			})
		}
	}
}

// BenchmarkAttention times the attention of a decode step of stories260K's
// head layout (8 heads of 8, 4 KV heads) at batch T and context ctx, split
// by KV group as the two-worker schedule splits it, on the eight-wide path
// and on the general one.
func BenchmarkAttention(b *testing.B) {
	vk := vecBuilt
	if vk == nil || vk.attn8 == nil {
		b.Skip("no eight-wide attention kernel in this build")
	}
	general := *vk
	general.attn8 = nil
	for _, sh := range [][2]int{{1, 64}, {64, 64}, {64, 256}} {
		for _, set := range []struct {
			name string
			vk   *vecOps
		}{{"attn8", vk}, {"general", &general}} {
			T, ctx := sh[0], sh[1]
			b.Run(fmt.Sprintf("T%d/ctx%d/%s", T, ctx, set.name), func(b *testing.B) {
				r := rand.New(rand.NewPCG(1, 2))
				c := attnCall(r, T, 8, 4, 8, 16, ctx)
				pos := c.o[5].i32()
				for i := range pos {
					pos[i] = int32(ctx - 1)
				}
				old := vec.Load()
				vec.Store(set.vk)
				defer vec.Store(old)
				units, _ := unitsAttention(c)
				k := &kctx{}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					runAttention(c, 0, units/2, k)
					runAttention(c, units/2, units, k)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(T*ctx*8), "ns/score")
			})
		}
	}
}
