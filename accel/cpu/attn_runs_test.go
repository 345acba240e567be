package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// prefillAttnCall is an attention call shaped like a prefill step: the
// tokens of each sequence in seqs (a count per sequence) are contiguous
// and at positions 0, 1, ... of their sequence (a causal prompt), except
// where jitter moves one to a random position or an invalid one (past
// the page table, or a page out of range), so that runs hold queries of
// different lengths and tokens left at zero.
func prefillAttnCall(r *rand.Rand, seqs []int, nh, nkv, hd, page int, jitter bool) *rcall {
	T, maxCtx := 0, 0
	for _, n := range seqs {
		T += n
		maxCtx = max(maxCtx, n+3)
	}
	ppr := (maxCtx + page - 1) / page
	npages := len(seqs)*ppr + 1
	c := attnData(r, T, nh, nkv, hd, page, npages)
	rows, pos := make([]int32, T), make([]int32, T)
	pages := make([]int32, len(seqs)*ppr)
	perm := r.Perm(npages - 1)
	for i := range pages {
		pages[i] = int32(perm[i] + 1)
	}
	t := 0
	for s, n := range seqs {
		for j := 0; j < n; j++ {
			rows[t], pos[t] = int32(s), int32(j)
			if jitter {
				switch r.IntN(8) {
				case 0:
					pos[t] = int32(r.IntN(maxCtx))
				case 1:
					pos[t] = int32(ppr * page) // past the table
				}
			}
			t++
		}
	}
	if jitter && len(seqs) > 1 {
		pages[ppr] = int32(npages) // sequence 1's first page is out of range
	}
	c.o[4] = operand{b: accel.I32Bytes(rows), rows: 1, cols: T, dt: accel.I32}
	c.o[5] = operand{b: accel.I32Bytes(pos), rows: 1, cols: T, dt: accel.I32}
	c.o[6] = operand{b: accel.I32Bytes(pages), rows: len(seqs), cols: ppr, dt: accel.I32}
	return c
}

// TestVecAttentionRuns: prefill-shaped attention (runs of one sequence's
// queries, whose keys the runs path transposes once) gives the plain-Go
// bits on every kernel set, whole and cut into pieces anywhere (a piece
// boundary splits a run, a head, or both), for runs shorter and longer than
// attnRunMin, grouped and single KV heads, and with scores that overflow
// or a NaN query.
func TestVecAttentionRuns(t *testing.T) { eachVecSet(t, testVecAttentionRuns) }

func testVecAttentionRuns(t *testing.T, vk *vecOps) {
	for _, tc := range []struct {
		seqs              []int
		nh, nkv, hd, page int
		jitter            bool
	}{
		{[]int{37}, 2, 2, 64, 16, false},
		{[]int{61, 3, 9}, 4, 2, 32, 8, true},
		{[]int{5, 70}, 2, 1, 16, 16, true},
		{[]int{1, 2, 3, 4, 5, 6, 7, 8}, 2, 2, 8, 4, false},
		{[]int{19}, 3, 3, 24, 16, true},
	} {
		for _, special := range []string{"", "big", "nan"} {
			name := fmt.Sprintf("%v/h%d/kv%d/hd%d/%s", tc.seqs, tc.nh, tc.nkv, tc.hd, special)
			r := rand.New(rand.NewPCG(uint64(tc.hd), uint64(len(special)+10*len(tc.seqs))))
			c := prefillAttnCall(r, tc.seqs, tc.nh, tc.nkv, tc.hd, tc.page, tc.jitter)
			q := c.o[1].f32()
			spoilQueries(q, special, len(q)/2+1)
			units, _ := unitsAttention(c)
			want := runAttnPieces(c, nil, []int{0, units})
			cuts := [][]int{{0, units}, {0, units / 2, units}, {0, units / 3, units/3 + 1, 2 * units / 3, units}}
			var rc []int
			for u := 0; u < units; u += 1 + r.IntN(9) {
				rc = append(rc, u)
			}
			cuts = append(cuts, append(rc, units))
			for _, cut := range cuts {
				sameAttnBits(t, fmt.Sprintf("%s, cuts %v", name, cut), runAttnPieces(c, vk, cut), want)
			}
		}
	}
}

// BenchmarkAttentionRuns times the attention of T queries of one sequence
// at the end of a context of ctx positions (a chunk of a long prompt;
// 12 heads of 64, two workers' halves) on the runs path (runs) and on the
// per-token path (token): where the two cross is attnRunMin.
func BenchmarkAttentionRuns(b *testing.B) {
	vk := vecBuilt
	if vk == nil || vk.scoresT == nil {
		b.Skip("no transposed-key scores in this build or on this CPU")
	}
	old := vec.Load()
	vec.Store(vk)
	defer vec.Store(old)
	for _, ctx := range []int{512, 2048} {
		for _, T := range []int{4, 8, 16, 32} {
			r := rand.New(rand.NewPCG(1, 2))
			c := attnTail(r, T, ctx)
			units, _ := unitsAttention(c)
			k := &kctx{}
			for _, path := range []string{"runs", "token"} {
				b.Run(fmt.Sprintf("ctx%d/T%d/%s", ctx, T, path), func(b *testing.B) {
					old := attnRunMin
					defer func() { attnRunMin = old }()
					attnRunMin = 1
					if path == "token" {
						attnRunMin = 1 << 30
					}
					for i := 0; i < b.N; i++ {
						runAttention(c, 0, units/2, k)
						runAttention(c, units/2, units, k)
					}
				})
			}
		}
	}
}
