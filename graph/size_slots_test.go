package graph

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/comm"
)

// With two slots, a rank whose warm-up of slot 0 of a bucket fails still
// meets a barrier for slot 1, as every peer does: Size ends on every rank,
// with the same collectives met (issue 19, item 1: the peers waited for
// ever). So do failures of a throwaway capture or a capture (an error) and
// of a golden check (a replay that diverges), through Size and Capture.
func TestRanksSizeTogetherWithTwoSlots(t *testing.T) {
	type failure struct {
		name string
		set  func(n *fakeNode)
		warm bool // the failure is the warm-up's
	}
	failures := []failure{
		{"warm-up of slot 0", func(n *fakeNode) { n.failWarm[SlotSpec{Bucket: bk(4), Slot: 0}] = true }, true},
		{"warm-up of slot 1", func(n *fakeNode) { n.failWarm[SlotSpec{Bucket: bk(4), Slot: 1}] = true }, true},
		{"capture of slot 0", func(n *fakeNode) { n.fail[SlotSpec{Bucket: bk(4), Slot: 0}] = "error" }, false},
		{"golden check of slot 1", func(n *fakeNode) { n.fail[SlotSpec{Bucket: bk(4), Slot: 1}] = "diverge" }, false},
	}
	for _, size := range []int{2, 3} {
		for _, f := range failures {
			t.Run(fmt.Sprintf("%d ranks, %s", size, f.name), func(t *testing.T) {
				group := comm.NewLocal(size)
				runners := make([]*Runner, size)
				for i := range runners {
					n := newFakeNode(t, true)
					if i == 1 {
						f.set(n)
					}
					runners[i] = newRunner(t, n, []*Config{small()}, Options{Group: group[i], Name: fmt.Sprintf("rank%d", i)})
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				var wg sync.WaitGroup
				errs := make([]error, size)
				costs := make([]map[BucketKey]CaptureCost, size)
				for i := range runners {
					wg.Add(1)
					go func() {
						defer wg.Done()
						costs[i], errs[i] = runners[i].Size(ctx)
						if errs[i] == nil {
							errs[i] = runners[i].Capture(ctx, nil)
						}
						if errs[i] != nil {
							cancel()
						}
					}()
				}
				wg.Wait()
				for i, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", i, err)
					}
				}
				for i := range group {
					if group[i].Collectives() != group[0].Collectives() {
						t.Errorf("rank %d met %d collectives, rank 0 %d", i, group[i].Collectives(), group[0].Collectives())
					}
				}
				if t.Failed() {
					return
				}
				if f.warm && (costs[1][bk(4)].Plannable() || !costs[0][bk(4)].Plannable()) {
					t.Errorf("bs=4 plannable: rank 0 %v, rank 1 %v; want only rank 0", costs[0][bk(4)].Plannable(), costs[1][bk(4)].Plannable())
				}
				// No rank keeps bs=4: it was dropped on rank 1.
				for i, r := range runners {
					if r.lookupBucket(bk(4)) != nil || len(r.Buckets()) != 2 {
						t.Errorf("rank %d registered %v, want bs=1 and bs=2 only", i, r.Buckets())
					}
				}
			})
		}
	}
}
