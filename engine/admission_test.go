package engine

import (
	"slices"
	"testing"
)

func TestAdmitHead(t *testing.T) {
	l := admitLimits{Rows: 4, Batch: 8, Tokens: 64}
	one := func(prompt, pages int) group { return group{Prompt: prompt, Rows: 1, Pages: pages} }
	for _, c := range []struct {
		name string
		free int
		p    prefillSoFar
		g    group
		want bool
	}{
		{"an empty engine", 10, prefillSoFar{}, one(10, 2), true},
		{"the prefill's rows are full", 10, prefillSoFar{Rows: 4, Tokens: 40}, one(1, 1), false},
		{"one row left", 10, prefillSoFar{Rows: 3, Tokens: 40}, one(1, 1), true},
		{"the running batch is full", 10, prefillSoFar{Running: 8}, one(1, 1), false},
		{"running and prefill fill the batch", 10, prefillSoFar{Running: 5, Rows: 3, Tokens: 3}, one(1, 1), false},
		{"the last place in the batch", 10, prefillSoFar{Running: 5, Rows: 2, Tokens: 3}, one(1, 1), true},
		{"the prompt's tokens overflow the prefill", 10, prefillSoFar{Rows: 1, Tokens: 60}, one(5, 1), false},
		{"the prompt's tokens just fit", 10, prefillSoFar{Rows: 1, Tokens: 60}, one(4, 1), true},
		{"a prompt alone past the token limit", 10, prefillSoFar{}, one(65, 5), false},
		{"the cache cannot promise its pages", 2, prefillSoFar{}, one(10, 3), false},
		{"the cache promises exactly its pages", 3, prefillSoFar{}, one(10, 3), true},
		// Forks: rows of the batch and pages promised once they open.
		{"a group's forks fill the batch", 10, prefillSoFar{Running: 4}, group{Prompt: 5, Rows: 4, Pages: 1, ForkPages: 3}, true},
		{"a group's forks overflow the batch", 10, prefillSoFar{Running: 5}, group{Prompt: 5, Rows: 4, Pages: 1, ForkPages: 3}, false},
		{"the prefill's forks take the last rows", 10, prefillSoFar{Running: 2, Rows: 1, ForkRows: 5}, one(1, 1), false},
		{"the forks' pages just fit", 4, prefillSoFar{}, group{Prompt: 5, Rows: 4, Pages: 1, ForkPages: 3}, true},
		{"the forks' pages do not fit", 3, prefillSoFar{}, group{Prompt: 5, Rows: 4, Pages: 1, ForkPages: 3}, false},
		{"the prefill's forks are owed the pages", 4, prefillSoFar{Rows: 1, Tokens: 5, ForkRows: 3, Owed: 3}, one(1, 2), false},
		{"beside what the prefill's forks are owed", 5, prefillSoFar{Rows: 1, Tokens: 5, ForkRows: 3, Owed: 3}, one(1, 2), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := admitHead(l, c.free, c.p, c.g); got != c.want {
				t.Errorf("admitHead = %v, want %v", got, c.want)
			}
		})
	}
	// add accumulates what admitHead checks against.
	p := prefillSoFar{Running: 1}.add(group{Prompt: 5, Rows: 3, Pages: 2, ForkPages: 4}).add(one(7, 1))
	if want := (prefillSoFar{Running: 1, Rows: 2, Tokens: 12, ForkRows: 2, Owed: 4}); p != want {
		t.Errorf("two groups admitted: %+v, want %+v", p, want)
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
