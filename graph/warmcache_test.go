package graph

import (
	"context"
	"testing"
)

// Only a warm-up that measures a cost empties the allocator's cache: Size's
// does (the segments the first warm-up reserves are part of the step's
// peak), while Capture's own warm-ups of specs sizing did not warm (the
// costs came from a plan cache) leave the cached segments for the steps
// to reuse.
func TestOnlyMeasuringWarmupsEmptyTheCache(t *testing.T) {
	const cached = 64 << 20
	for _, tc := range []struct {
		name    string
		size    bool
		emptied bool
	}{
		{"capture without sizing", false, false},
		{"sizing", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newFakeNode(t, false)
			r := newRunner(t, n, []*Config{small()}, Options{})
			if _, err := r.Prepare(); err != nil {
				t.Fatal(err)
			}
			b, err := n.dev.Alloc(cached)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.dev.Free(b); err != nil {
				t.Fatal(err)
			}
			before := n.dev.Allocator().Stats().Reserved
			if tc.size {
				if _, err := r.Size(context.Background()); err != nil {
					t.Fatal(err)
				}
			} else if err := r.Capture(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			if got := len(r.Buckets()); !tc.size && got != 3 {
				t.Fatalf("%d buckets captured, want 3", got)
			}
			after := n.dev.Allocator().Stats().Reserved
			if emptied := after < before-cached/2; emptied != tc.emptied {
				t.Fatalf("reserved %d before, %d after: cache emptied %v, want %v", before, after, emptied, tc.emptied)
			}
		})
	}
}
