package graph

import (
	"context"
	"slices"
	"testing"
)

// DeclareInputsFor gives each slot its own padding rows: the cache is keyed
// by (bucket, slot), not by bucket, so slot 1's declare rows are slot 1's
// padding rows, never slot 0's (issue 19, item 5).
func TestDeclareInputsForEachSlot(t *testing.T) {
	n := newFakeNode(t, true)
	r := newRunner(t, n, []*Config{small()}, Options{})
	if err := r.Capture(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	k := BucketKey{Walk: "decode", BatchSize: 4, Tokens: 4}
	ids := func(rows []Row) []int64 {
		var out []int64
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	for _, order := range [][]int{{0, 1}, {1, 0}} {
		r.mu.Lock()
		clear(r.declare)
		r.mu.Unlock()
		got := map[int][]int64{}
		for _, slot := range order {
			l := r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: 4, Tokens: 4, PinSlot: true, Slot: slot})
			rows, err := r.DeclareInputsFor(l)
			if err != nil {
				t.Fatal(err)
			}
			s, err := r.slotFor(l)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(rows), s.padIDs) {
				t.Errorf("order %v: slot %d of %v declares rows %v, its padding rows are %v", order, slot, k, ids(rows), s.padIDs)
			}
			got[slot] = ids(rows)
		}
		if slices.Equal(got[0], got[1]) {
			t.Errorf("order %v: both slots declare the same rows %v", order, got[0])
		}
	}
}
