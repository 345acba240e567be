package graph

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/comm"
)

// rankSizing is what one rank saw of Size, SizeLent, Plan, AgreePlan and
// Capture.
type rankSizing struct {
	runner *Runner
	costs  map[BucketKey]CaptureCost // Size's
	sized  Resized                   // SizeLent's
	agreed map[BucketKey]bool        // AgreePlan's
	// collectives met after Size, after SizeLent and at the end.
	afterSize, afterLent, atEnd int
}

// Ranks size, re-size, plan and capture together: a rank that wants its lent
// buckets measured makes every rank measure them, and whatever a rank's
// warm-ups did, every rank meets the same collectives and keeps the same
// graphs.
func TestRanksSizeTogether(t *testing.T) {
	all := []BucketKey{bk(8), bk(4), bk(2), bk(1)}
	cases := []struct {
		name     string
		wants    int // the only rank that wants the lent buckets re-sized
		failWarm int // the only rank whose bs=8 fails to warm up; -1: none
	}{
		{"one rank wants the re-size", 0, -1},
		{"warm-up fails on one rank", 0, 1},
		{"the rank whose warm-up failed wants the re-size", 1, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const size = 2
			group := comm.NewLocal(size)
			res := make([]*rankSizing, size)
			for i := range res {
				n := newFakeNode(t, false)
				n.scratch = growing
				if i == tc.failWarm {
					n.failWarm[SlotSpec{Bucket: bk(8)}] = true
				}
				c := small()
				c.BatchSizes = []int{1, 2, 4, 8}
				res[i] = &rankSizing{runner: newRunner(t, n, []*Config{c}, Options{Group: group[i], Name: fmt.Sprintf("rank%d", i)})}
			}
			// A rank left waiting at a collective its peer skipped fails
			// the test instead of hanging it.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			errs := make([]error, size)
			for i := range res {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					errs[i] = res[i].run(ctx, group[i], i == tc.wants)
					if errs[i] != nil {
						cancel()
					}
				}(i)
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", i, err)
				}
			}
			if t.Failed() {
				t.FailNow()
			}

			for i, rs := range res {
				// Size: before any re-size the warm-up failure is local.
				if got := rs.costs[bk(8)].Plannable(); got == (i == tc.failWarm) {
					t.Errorf("rank %d: bs=8 plannable %v after Size", i, got)
				}
				if rs.costs[bk(1)].Lender == nil {
					t.Errorf("rank %d: bs=1 was not lent by Size", i)
				}
				// SizeLent: every rank re-sized, whichever rank asked.
				if !rs.sized.Resized {
					t.Errorf("rank %d did not re-size though rank %d wanted it", i, tc.wants)
				}
				for _, k := range all {
					if l := rs.sized.Costs[k].Lender; l != nil {
						t.Errorf("rank %d: %v still costed from %v after the re-size", i, k, *l)
					}
				}
				if got, want := rs.sized.Costs[bk(8)].Plannable(), i != tc.failWarm; got != want {
					t.Errorf("rank %d: bs=8 plannable %v after SizeLent, want %v", i, got, want)
				}
				// Agreement and capture: the bucket that failed to warm up on
				// one rank is dropped on every rank; the rest are kept.
				want := all
				if tc.failWarm >= 0 {
					want = all[1:]
				}
				var agreed []BucketKey
				for _, k := range all {
					if rs.agreed[k] {
						agreed = append(agreed, k)
					}
				}
				if !slices.Equal(agreed, want) {
					t.Errorf("rank %d agreed on %v, want %v", i, agreed, want)
				}
				if got := rs.runner.Buckets(); !slices.Equal(got, want) {
					t.Errorf("rank %d registered %v, want %v", i, got, want)
				}
			}
			// Every rank met the same collectives at every stage: one barrier
			// per warmed spec, one agreement in SizeLent, one in AgreePlan,
			// one barrier per captured spec and one agreement in Capture.
			captured := 4
			if tc.failWarm >= 0 {
				captured = 3
			}
			wants := [3]int{4, 4 + 1, 4 + 1 + 1 + captured + 1}
			for i, rs := range res {
				if got := [3]int{rs.afterSize, rs.afterLent, rs.atEnd}; got != wants {
					t.Errorf("rank %d met %v collectives after Size, SizeLent and Capture, want %v", i, got, wants)
				}
			}
		})
	}
}

// run is one rank's sizing and capture, recording what it saw.
func (rs *rankSizing) run(ctx context.Context, g *comm.Local, wanted bool) error {
	r := rs.runner
	var err error
	if rs.costs, err = r.Size(ctx); err != nil {
		return err
	}
	rs.afterSize = g.Collectives()
	if rs.sized, err = r.SizeLent(ctx, rs.costs, wanted); err != nil {
		return err
	}
	rs.afterLent = g.Collectives()
	p := Plan(map[string]map[BucketKey]CaptureCost{"decode": rs.sized.Costs}, 1<<30, 0)
	planned := map[BucketKey]bool{}
	for _, k := range p.Buckets["decode"] {
		planned[k] = true
	}
	if rs.agreed, err = r.AgreePlan(ctx, planned); err != nil {
		return err
	}
	if err := r.Capture(ctx, rs.agreed); err != nil {
		return err
	}
	rs.atEnd = g.Collectives()
	return nil
}
