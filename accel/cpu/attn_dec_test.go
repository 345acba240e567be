package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestAttnDecMatchesGeneral: a set's decode attention path (attnDec) gives
// its general per-token path's bits and the plain-Go kernels', at head
// sizes 64 and 128, with and without grouped KV heads, at every context
// length around its blocks of sixteen and at long contexts, for whole rows and
// rows split between workers (including splits inside a KV group), with
// scores that overflow and a NaN query. A set without the path: its general
// path against plain Go.
func TestAttnDecMatchesGeneral(t *testing.T) { eachVecSet(t, testAttnDecMatchesGeneral) }

func testAttnDecMatchesGeneral(t *testing.T, vk *vecOps) {
	general := *vk
	general.attnDec = nil
	sets := map[string]*vecOps{"attnDec": vk, "general": &general}
	if vk.attnDec == nil {
		delete(sets, "attnDec")
	}
	type shape struct{ T, nh, nkv, hd, page, ctx int }
	var shapes []shape
	for ctx := 1; ctx <= 40; ctx++ {
		shapes = append(shapes, shape{3, 4, 4, 64, 16, ctx})
	}
	shapes = append(shapes,
		shape{5, 8, 8, 64, 16, 34}, shape{4, 12, 12, 64, 16, 33}, shape{3, 4, 2, 64, 8, 29},
		shape{3, 8, 2, 64, 16, 47}, shape{2, 4, 4, 128, 16, 17}, shape{3, 4, 2, 128, 32, 40},
		shape{2, 6, 6, 64, 16, 300}, shape{2, 4, 2, 128, 16, 260}, shape{2, 12, 12, 64, 32, 513},
		shape{2, 4, 4, 32, 16, 21}, shape{2, 4, 4, 16, 16, 19}, shape{2, 2, 2, 192, 16, 23},
		shape{3, 4, 4, 64, 16, 64}, shape{3, 8, 2, 128, 16, 70}, shape{2, 3, 3, 64, 16, 97}, shape{2, 2, 2, 192, 16, 90},
	)
	for _, tc := range shapes {
		for _, special := range []string{"", "big", "nan"} {
			if special != "" && tc.ctx%7 != 0 && tc.ctx < 41 && tc.nh == 4 && tc.hd == 64 && tc.nkv == 4 {
				continue // the specials at a few lengths of the sweep
			}
			name := fmt.Sprintf("T%d/h%d/kv%d/hd%d/page%d/ctx%d/%s", tc.T, tc.nh, tc.nkv, tc.hd, tc.page, tc.ctx, special)
			t.Run(name, func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(tc.T*1000+tc.ctx), uint64(tc.hd*10+len(special))))
				c := attnCall(r, tc.T, tc.nh, tc.nkv, tc.hd, tc.page, tc.ctx)
				q := c.o[1].f32()
				spoilQueries(q, special, len(q)-3)
				units, _ := unitsAttention(c)
				splits := [][]int{{0, units}, {0, units / 2, units}, {0, units / 3, 2 * units / 3, units}, {0, 1, units - 1, units}}
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
