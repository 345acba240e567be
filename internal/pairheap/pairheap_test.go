package pairheap

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestScoreOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	type item struct {
		score float32
		pos   int32
	}
	// The -0 is math.Copysign(0, -1): the constant -0.0 is +0 in Go.
	scores := []float32{-1e10, -1000, -3.5, float32(math.Copysign(0, -1)), 0, 1e-30, 2, 7.25, 1e10, float32(math.Inf(1)), float32(math.Inf(-1))}
	var h Heap[item]
	var all []item
	for i := range 2000 {
		it := item{scores[rng.IntN(len(scores))], int32(i)}
		all = append(all, it)
		h.Push(ScoreKey(it.score, it.pos), it)
	}
	slices.SortFunc(all, func(a, b item) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return int(a.pos - b.pos)
	})
	for i, want := range all {
		if got := h.Pop(); got != want {
			t.Fatalf("pop %d = %v, want %v", i, got, want)
		}
	}
	if h.Len() != 0 {
		t.Fatalf("Len = %d after popping all", h.Len())
	}
}

func TestRankOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var h Heap[int]
	var keys [][2]int32
	for i := range 1000 {
		k := [2]int32{int32(rng.IntN(20)), int32(i)}
		keys = append(keys, k)
		h.Push(RankKey(k[0], k[1]), i)
	}
	slices.SortFunc(keys, func(a, b [2]int32) int {
		if a[0] != b[0] {
			return int(a[0] - b[0])
		}
		return int(a[1] - b[1])
	})
	for _, k := range keys {
		if got := h.Pop(); got != int(k[1]) {
			t.Fatalf("pop = %d, want %d", got, k[1])
		}
	}
}
