// Package pairheap is the binary heap the tokenizers' merge loops share: the
// candidate pairs of a BPE or SentencePiece merge, best first, so a text of
// n symbols merges in O(n log n).
//
// Items are ordered by a uint64 key, smallest first, so that comparing two
// is one integer comparison whatever the item: RankKey and ScoreKey build
// the keys the merge loops need.
package pairheap

import "math"

type entry[T any] struct {
	key uint64
	v   T
}

// Heap is a binary min-heap of items by key. The zero value is empty and
// ready.
type Heap[T any] []entry[T]

// Len is the number of items.
func (h Heap[T]) Len() int { return len(h) }

// Push adds v with key.
func (h *Heap[T]) Push(key uint64, v T) {
	*h = append(*h, entry[T]{key, v})
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[i].key >= s[p].key {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

// Pop removes and returns the item with the smallest key; the heap must
// not be empty.
func (h *Heap[T]) Pop() T {
	s := *h
	top := s[0].v
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s[l].key < s[m].key {
			m = l
		}
		if r < n && s[r].key < s[m].key {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// RankKey orders by rank, lowest first, then by position, lowest first
// (BPE merges). Both must be non-negative.
func RankKey(rank, pos int32) uint64 { return uint64(uint32(rank))<<32 | uint64(uint32(pos)) }

// ScoreKey orders by score, highest first, then by position, lowest first
// (SentencePiece merges). pos must be non-negative.
func ScoreKey(score float32, pos int32) uint64 {
	if score == 0 {
		score = 0 // -0 is the same score as +0
	}
	b := math.Float32bits(score)
	// Map the float's bits to an unsigned order (negatives reversed), then
	// invert so that the highest score is the smallest key.
	if b&(1<<31) != 0 {
		b = ^b
	} else {
		b |= 1 << 31
	}
	return uint64(^b)<<32 | uint64(uint32(pos))
}
