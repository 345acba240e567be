package cpu

import (
	"fmt"
	"math"
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
// attnRunMin, over one panel of keys and several, grouped and single KV
// heads, head dims 8 to 128, and with scores that overflow or a NaN query.
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
		{[]int{130, 11}, 2, 1, 128, 16, true},
		{[]int{101}, 1, 1, 64, 8, false},
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

// TestVecScoresT: each set's scoresT gives the plain-Go scores (a
// sequential chain of rounded products over the head, then the division)
// bit for bit, for head dims of 8 to 136, row lengths of one block of eight
// to past twelve (odd and even counts of eight, so that a sixteen-lane
// kernel's half block and every width of its side-by-side blocks run), in
// panels wider than the row, with scores that overflow and NaN keys; and
// scoresT2, where the set has it, for two queries at once.
func TestVecScoresT(t *testing.T) { eachVecSet(t, testVecScoresT) }

func testVecScoresT(t *testing.T, vk *vecOps) {
	if vk.scoresT == nil {
		t.Skip("no scoresT in this set")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, hd := range []int{8, 16, 24, 32, 64, 72, 128, 136} {
		for _, n := range []int{8, 16, 24, 40, 48, 56, 88, 96, 104, 152} {
			for _, special := range []string{"", "big", "nan"} {
				width := n + 8*r.IntN(3)
				kt := normF32(r, hd*width)
				q := normF32(r, hd)
				spoilQueries(q, special, r.IntN(hd))
				if special == "nan" {
					kt[r.IntN(len(kt))] = float32(math.NaN())
				}
				q1 := normF32(r, hd)
				scale := sqrt32(float32(hd))
				ref := func(q []float32) []float32 {
					want := make([]float32, n)
					for p := range want {
						var s float32
						for i, a := range q {
							s += float32(a * kt[i*width+p])
						}
						want[p] = s / scale
					}
					return want
				}
				want, want1 := ref(q), ref(q1)
				row := func() []float32 {
					got := make([]float32, n+8)
					for i := range got {
						got[i] = 7
					}
					return got
				}
				what := fmt.Sprintf("hd %d, n %d, width %d, %s", hd, n, width, special)
				untouched := func(what string, got []float32) {
					for i, v := range got[n:] {
						if v != 7 {
							t.Fatalf("%s: wrote att[%d] past the row", what, n+i)
						}
					}
				}
				got := row()
				vk.scoresT(got[:n], kt, width, q, scale)
				sameAttnBits(t, what, got[:n], want)
				untouched(what, got)
				if vk.scoresT2 == nil {
					continue
				}
				g0, g1 := row(), row()
				vk.scoresT2(g0[:n], g1[:n], kt, width, q, q1, scale)
				sameAttnBits(t, what+", scoresT2 first", g0[:n], want)
				sameAttnBits(t, what+", scoresT2 second", g1[:n], want1)
				untouched(what+", scoresT2 first", g0)
				untouched(what+", scoresT2 second", g1)
			}
		}
	}
}

// TestVecAVRows: each set's avRows adds the weighted rows of values in
// position order per element, as the plain-Go loop, for one query and two
// (the second's weights different), head dims of 8 to 200 (every piece
// width of the kernels), from 1 to 70 positions, with an extreme weight.
func TestVecAVRows(t *testing.T) { eachVecSet(t, testVecAVRows) }

func testVecAVRows(t *testing.T, vk *vecOps) {
	if vk.avRows == nil {
		t.Skip("no avRows in this set")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, hd := range []int{8, 16, 24, 32, 40, 64, 72, 96, 128, 136, 200} {
		for _, n := range []int{1, 2, 7, 8, 33, 64, 70} {
			for _, two := range []bool{false, true} {
				vb := normF32(r, n*hd)
				a0, a1 := normF32(r, n), normF32(r, n)
				if n == 33 {
					// An overflow: that element's chains end at ±Inf or NaN.
					a0[r.IntN(n)] = 3e38
				}
				d0, d1 := normF32(r, hd), normF32(r, hd)
				w0, w1 := append([]float32(nil), d0...), append([]float32(nil), d1...)
				for p := 0; p < n; p++ {
					for i := range w0 {
						w0[i] += float32(a0[p] * vb[p*hd+i])
						w1[i] += float32(a1[p] * vb[p*hd+i])
					}
				}
				what := fmt.Sprintf("hd %d, n %d, two %v", hd, n, two)
				if two {
					vk.avRows(d0, d1, vb, a0, a1)
					sameAttnBits(t, what+", second", d1, w1)
				} else {
					vk.avRows(d0, nil, vb, a0, nil)
				}
				sameAttnBits(t, what, d0, w0)
			}
		}
	}
}

// TestVecKeysT8: each set's keysT8 transposes eight key rows (any rows of
// the cache) into a panel, touching nothing else of it.
func TestVecKeysT8(t *testing.T) { eachVecSet(t, testVecKeysT8) }

func testVecKeysT8(t *testing.T, vk *vecOps) {
	if vk.keysT8 == nil {
		t.Skip("no keysT8 in this set")
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, hd := range []int{8, 16, 24, 64, 128} {
		for _, width := range []int{8, 24, 48, 96} {
			kc := normF32(r, 40*hd)
			offs := make([]int, 8)
			for j := range offs {
				offs[j] = r.IntN(40) * hd
			}
			dst := make([]float32, hd*width)
			for i := range dst {
				dst[i] = 7
			}
			j0 := 8 * r.IntN(width/8)
			vk.keysT8(dst[j0:], width, kc, offs, hd)
			for i := 0; i < hd; i++ {
				for j := 0; j < width; j++ {
					want := float32(7)
					if j >= j0 && j < j0+8 {
						want = kc[offs[j-j0]+i]
					}
					if !sameBits32(dst[i*width+j], want) {
						t.Fatalf("hd %d, width %d: dst[%d*width+%d] = %v, want %v", hd, width, i, j, dst[i*width+j], want)
					}
				}
			}
		}
	}
}
