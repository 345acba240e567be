package graph

import (
	"fmt"
	"slices"
	"testing"
)

// Each warm-up and each capture runs the same step from the same state: the
// padding rows at rest (length 0), the step then prepared once. After a
// warm-up the runner resets the padding rows and prepares the step again; a
// runner that skipped the reset would run its second warm-up (whose outputs
// are the golden eager result) and plan the capture's step at a later
// position. The fake fails any forward on a capture lease whose step was
// prepared with a padding row off rest, so the buckets would be dropped.
// Covered for Capture, for sizing then Capture, and for the background path.
func TestCapturesStartFromPaddingAtRest(t *testing.T) {
	for _, p := range capturePaths {
		t.Run(p.name, func(t *testing.T) {
			n := newFakeNode(t, true)
			// Two tokens a padding row: each prepare moves a row two
			// positions on.
			cfg := &Config{Walk: "decode", Batched: &Batched{TokensPerRow: 2}, BatchSizes: []int{1, 2, 4}}
			r := newRunner(t, n, []*Config{cfg}, Options{})
			// At the capture itself, each padding row of the step holds
			// exactly the step's tokens: prepared once since it was at rest.
			var atCapture []string
			n.onCapture = func(spec SlotSpec) {
				n.mu.Lock()
				defer n.mu.Unlock()
				start := n.stepStart[SlotKey{Bucket: spec.Bucket, Slot: spec.Slot}]
				if len(start) != spec.Bucket.BatchSize {
					atCapture = append(atCapture, fmt.Sprintf("%v: %d padding rows, want %d", spec, len(start), spec.Bucket.BatchSize))
				}
				for id := range start {
					if got := n.padLen[id]; got != 2 {
						atCapture = append(atCapture, fmt.Sprintf("%v: padding row %d at length %d, want 2", spec, id, got))
					}
				}
			}
			p.run(t, r)
			if len(n.offRest) > 0 {
				t.Errorf("steps prepared with padding rows off rest:\n%v", n.offRest)
			}
			slices.Sort(atCapture)
			if len(atCapture) > 0 {
				t.Errorf("at capture:\n%v", atCapture)
			}
			if got := r.Buckets(); !slices.Equal(got, []BucketKey{
				{Walk: "decode", BatchSize: 4, Tokens: 8}, {Walk: "decode", BatchSize: 2, Tokens: 4}, {Walk: "decode", BatchSize: 1, Tokens: 2},
			}) || len(r.droppedKeys()) != 0 {
				t.Fatalf("registered %v, dropped %v: want every bucket", got, r.droppedKeys())
			}
			// Every spec captured (sizing adds throwaway captures).
			captured := map[specKey]bool{}
			for _, sp := range n.captures {
				captured[sp.key()] = true
			}
			if len(captured) != 6 {
				t.Fatalf("captured %d specs, want 6", len(captured))
			}
			// Every warm-up ran (NumWarmup per spec), each from rest.
			for _, sp := range r.Specs() {
				if got := n.warmups[sp.key()]; got != NumWarmup {
					t.Errorf("%v warmed %d times, want %d", sp, got, NumWarmup)
				}
			}
			// Back at rest once capture is over.
			for id, l := range n.padLen {
				if l != 0 {
					t.Errorf("padding row %d at length %d after capture", id, l)
				}
			}
		})
	}
}
