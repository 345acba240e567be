package engine

import (
	"slices"
	"testing"
)

// pages is a capacity of free pages of 16 positions.
type pages int

func (p pages) CanHold(maxLen int) bool { return (maxLen+15)/16 <= int(p) }

func TestAdmitHead(t *testing.T) {
	l := admitLimits{Rows: 4, Batch: 8, Tokens: 64}
	for _, c := range []struct {
		name                                 string
		free                                 pages
		running, rows, tokens, prompt, maxLn int
		want                                 bool
	}{
		{"an empty engine", 10, 0, 0, 0, 10, 20, true},
		{"the prefill's rows are full", 10, 0, 4, 40, 1, 2, false},
		{"one row left", 10, 0, 3, 40, 1, 2, true},
		{"the running batch is full", 10, 8, 0, 0, 1, 2, false},
		{"running and prefill fill the batch", 10, 5, 3, 3, 1, 2, false},
		{"the last place in the batch", 10, 5, 2, 3, 1, 2, true},
		{"the prompt's tokens overflow the prefill", 10, 0, 1, 60, 5, 10, false},
		{"the prompt's tokens just fit", 10, 0, 1, 60, 4, 10, true},
		{"a prompt alone past the token limit", 10, 0, 0, 0, 65, 70, false},
		{"the cache cannot promise its pages", 2, 0, 0, 0, 10, 40, false},
		{"the cache promises exactly its pages", 3, 0, 0, 0, 10, 48, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := admitHead(l, c.free, c.running, c.rows, c.tokens, c.prompt, c.maxLn); got != c.want {
				t.Errorf("admitHead = %v, want %v", got, c.want)
			}
		})
	}
}

func TestDecodeRowsAndRotation(t *testing.T) {
	for _, c := range []struct {
		name      string
		running   []int
		maxBatch  int
		survivors func(batch []int) []int
		want      []int
	}{
		{"all fit, all go on", []int{1, 2, 3}, 4, func(b []int) []int { return b }, []int{1, 2, 3}},
		{"all fit, one ends", []int{1, 2, 3}, 4, func([]int) []int { return []int{1, 3} }, []int{1, 3}},
		{"more than a batch: the rest go first", []int{1, 2, 3, 4, 5}, 2, func(b []int) []int { return b }, []int{3, 4, 5, 1, 2}},
		{"more than a batch, the batch ends", []int{1, 2, 3, 4, 5}, 2, func([]int) []int { return nil }, []int{3, 4, 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := decodeRows(len(c.running), c.maxBatch)
			if n != min(len(c.running), c.maxBatch) {
				t.Fatalf("decodeRows(%d, %d) = %d", len(c.running), c.maxBatch, n)
			}
			batch := slices.Clone(c.running[:n])
			if got := rotate(c.running, n, c.survivors(batch)); !slices.Equal(got, c.want) {
				t.Errorf("after a decode of %v: %v, want %v", batch, got, c.want)
			}
		})
	}
	// Every request gets its turn: rotating 5 requests through batches of 2
	// decodes each of them within three steps.
	running, seen := []int{1, 2, 3, 4, 5}, map[int]bool{}
	for range 3 {
		n := decodeRows(len(running), 2)
		for _, r := range running[:n] {
			seen[r] = true
		}
		running = rotate(running, n, slices.Clone(running[:n]))
	}
	if len(seen) != 5 {
		t.Errorf("three decodes of two reached only %v", seen)
	}
}
