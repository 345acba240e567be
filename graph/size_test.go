package graph

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/accel/alloc"
	"github.com/reprise-ml/reprise/comm"
)

func bk(bs int) BucketKey { return BucketKey{Walk: "decode", BatchSize: bs, Tokens: bs} }

// Scratch that grows with the batch: each bucket's graph nests in the
// larger ones'.
func growing(k BucketKey) int { return k.BatchSize * 1 << 18 }

func TestSizeMeasuresEveryBucketOnceBeforeCapture(t *testing.T) {
	n := newFakeNode(t, true)
	n.scratch = growing
	r := newRunner(t, n, []*Config{small()}, Options{})
	costs, err := r.Size(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(costs) != 3 {
		t.Fatalf("costs %v", costs)
	}
	// Every slot of every bucket warmed NumWarmup times, nothing registered.
	for _, bs := range []int{1, 2, 4} {
		for slot := 0; slot < 2; slot++ {
			if got := n.warmups[specKey{bk(bs), slot}]; got != NumWarmup {
				t.Fatalf("bs=%d slot %d warmed %d times", bs, slot, got)
			}
		}
	}
	if len(r.Buckets()) != 0 {
		t.Fatal("sizing registered buckets")
	}
	// The two largest are measured, the smallest costed from bs=2.
	if costs[bk(4)].Lender != nil || costs[bk(2)].Lender != nil {
		t.Fatalf("the two largest were not measured: %+v %+v", costs[bk(4)], costs[bk(2)])
	}
	if l := costs[bk(1)].Lender; l == nil || *l != bk(2) {
		t.Fatalf("bs=1 costed from %v, want bs=2", l)
	}
	if costs[bk(1)].Graph != costs[bk(2)].Graph || costs[bk(4)].Graph < costs[bk(2)].Graph {
		t.Fatalf("graphs %d %d %d", costs[bk(4)].Graph, costs[bk(2)].Graph, costs[bk(1)].Graph)
	}
	for _, c := range costs {
		if c.Peak <= 0 || c.Slots != 2 || len(c.Outputs) != 2 || c.Outside != alloc.RoundUp(c.Outputs[0])+alloc.RoundUp(c.Outputs[1]) || c.Executable <= 0 {
			t.Fatalf("cost %+v", c)
		}
	}
	// Throwaway captures gave their memory back: only the runner's pool is
	// left, and it is empty.
	if st := n.dev.Allocator().Stats(); st.Pools != 1 || st.PoolReserved != 0 {
		t.Fatalf("after sizing: %d pools holding %d bytes", st.Pools, st.PoolReserved)
	}
	// The real capture runs no forward of its own.
	if err := r.Capture(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	for k, v := range n.warmups {
		if v != NumWarmup {
			t.Fatalf("%v was warmed again by the capture (%d forwards)", k, v)
		}
	}
	if len(r.Buckets()) != 3 {
		t.Fatalf("registered %v", r.Buckets())
	}
}

func TestSizeNonNestingAndHigherPeaks(t *testing.T) {
	t.Run("non-nesting", func(t *testing.T) {
		n := newFakeNode(t, false)
		// The second largest needs more than the largest: the graphs do not
		// nest, so every bucket is measured.
		n.scratch = func(k BucketKey) int {
			if k.BatchSize == 4 {
				return 1 << 21
			}
			return 1 << 18
		}
		c := small()
		c.BatchSizes = []int{1, 2, 4, 8}
		r := newRunner(t, n, []*Config{c}, Options{})
		costs, err := r.Size(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range costs {
			if c.Lender != nil {
				t.Fatalf("%v costed from %v in a non-nesting walk", c.Bucket, *c.Lender)
			}
		}
	})
	t.Run("later higher peak", func(t *testing.T) {
		n := newFakeNode(t, false)
		n.scratch = func(k BucketKey) int {
			if k.BatchSize == 1 {
				return 1 << 22 // the smallest bucket peaks highest
			}
			return 1 << 18
		}
		c := small()
		c.BatchSizes = []int{1, 2, 4, 8}
		r := newRunner(t, n, []*Config{c}, Options{})
		costs, _ := r.Size(context.Background())
		if costs[bk(1)].Lender != nil {
			t.Fatal("a bucket whose peak exceeds every larger one's was not measured")
		}
		if l := costs[bk(2)].Lender; l == nil || *l != bk(4) {
			t.Fatalf("bs=2 costed from %v", l)
		}
		if costs[bk(1)].Graph <= costs[bk(8)].Graph {
			t.Fatal("the high-peak bucket's graph was not measured larger")
		}
	})
	t.Run("failed largest", func(t *testing.T) {
		n := newFakeNode(t, false)
		n.scratch = growing
		n.fail[SlotSpec{Bucket: bk(8)}] = "error"
		c := small()
		c.BatchSizes = []int{1, 2, 4, 8}
		r := newRunner(t, n, []*Config{c}, Options{})
		costs, _ := r.Size(context.Background())
		if costs[bk(8)].Plannable() {
			t.Fatal("a bucket that failed to capture is plannable")
		}
		if costs[bk(4)].Lender != nil || costs[bk(2)].Lender != nil {
			t.Fatal("the next two buckets did not size the rest")
		}
		if l := costs[bk(1)].Lender; l == nil || *l != bk(2) {
			t.Fatalf("bs=1 costed from %v", l)
		}
		if st := n.dev.Allocator().Stats(); st.PoolReserved != 0 || st.Pools != 1 {
			t.Fatalf("a failed throwaway kept memory: %+v", st)
		}
	})
	t.Run("second slot fails warm-up", func(t *testing.T) {
		n := newFakeNode(t, true)
		n.failWarm[SlotSpec{Bucket: bk(2), Slot: 1}] = true
		r := newRunner(t, n, []*Config{small()}, Options{})
		costs, _ := r.Size(context.Background())
		if costs[bk(2)].Plannable() || costs[bk(2)].Peak <= 0 {
			t.Fatalf("bs=2: %+v", costs[bk(2)])
		}
		p := Plan(map[string]map[BucketKey]CaptureCost{"p": costs}, 1<<30, 0)
		if p.Chosen("p", bk(2)) || p.Why[bk(2)] == "" {
			t.Fatal("a bucket whose second slot failed warm-up was planned")
		}
		if !p.Chosen("p", bk(4)) || !p.Chosen("p", bk(1)) {
			t.Fatalf("plan %v", p.Buckets)
		}
	})
}

func TestSizeLent(t *testing.T) {
	n := newFakeNode(t, false)
	n.scratch = growing
	c := small()
	c.BatchSizes = []int{1, 2, 4, 8}
	r := newRunner(t, n, []*Config{c}, Options{})
	costs, _ := r.Size(context.Background())
	if costs[bk(1)].Lender == nil {
		t.Fatal("bs=1 should be lent")
	}
	same, _ := r.SizeLent(context.Background(), costs, false)
	if same.Resized || same.Costs[bk(1)].Lender == nil {
		t.Fatal("not wanted anywhere: nothing should be re-sized")
	}
	own, _ := r.SizeLent(context.Background(), costs, true)
	if !own.Resized || own.Costs[bk(1)].Lender != nil || own.Costs[bk(1)].Graph > costs[bk(1)].Graph {
		t.Fatalf("bs=1 after sizing its own: %+v (was %+v)", own.Costs[bk(1)], costs[bk(1)])
	}
}

func cost(k BucketKey, graph, kept int64, slots int) CaptureCost {
	return CaptureCost{Bucket: k, Peak: graph / 2, Graph: graph, Kept: kept, Slots: slots}
}

func TestPlan(t *testing.T) {
	const mb = 1 << 20
	decode := map[BucketKey]CaptureCost{
		bk(1): cost(bk(1), 1*mb, 0, 2),
		bk(2): cost(bk(2), 2*mb, 0, 2),
		bk(4): cost(bk(4), 8*mb, 0, 2),
	}
	pk := func(n int) BucketKey { return BucketKey{Walk: "prefill", BatchSize: 1, Tokens: n} }
	prefill := map[BucketKey]CaptureCost{
		pk(16):  cost(pk(16), 3*mb, 1*mb, 1),
		pk(512): cost(pk(512), 40*mb, 2*mb, 1),
	}
	pools := map[string]map[BucketKey]CaptureCost{"decode": decode, "prefill": prefill}
	t.Run("everything fits", func(t *testing.T) {
		p := Plan(pools, 1<<30, 0)
		if len(p.Buckets["decode"]) != 3 || len(p.Buckets["prefill"]) != 2 {
			t.Fatalf("plan %v", p.Buckets)
		}
		// A pool costs what its graphs keep plus the most scratch any needs.
		if p.Predicted["decode"] != 8*mb || p.Predicted["prefill"] != 3*mb+38*mb {
			t.Fatalf("predicted %v", p.Predicted)
		}
		if p.Floor != 20*mb {
			t.Fatalf("floor %d, want the largest peak", p.Floor)
		}
		if got := p.Buckets["decode"]; !slices.Equal(got, []BucketKey{bk(4), bk(2), bk(1)}) {
			t.Fatalf("capture order %v, want largest first", got)
		}
	})
	t.Run("small graphs from every pool first", func(t *testing.T) {
		// Room beside the 20 MiB floor for 1 + 2 (decode) + 3 (prefill 16 +
		// its kept) = 7 MiB of the cheapest, not for bs=4 (8) or 512 (41).
		p := Plan(pools, 20*mb+7*mb, 0)
		if !slices.Equal(p.Buckets["decode"], []BucketKey{bk(2), bk(1)}) || !slices.Equal(p.Buckets["prefill"], []BucketKey{pk(16)}) {
			t.Fatalf("plan %v", p.Buckets)
		}
		if p.Why[bk(4)] == "" || p.Why[pk(512)] == "" {
			t.Fatalf("why %v", p.Why)
		}
	})
	t.Run("all slots or none", func(t *testing.T) {
		two := map[string]map[BucketKey]CaptureCost{"p": {bk(1): CaptureCost{Bucket: bk(1), Peak: 1, Graph: 4 * mb, Kept: 3 * mb, Slots: 2}}}
		// One slot's kept and the scratch fit (4 MiB), both slots' (7) do not.
		if p := Plan(two, 6*mb, 0); len(p.Buckets["p"]) != 0 {
			t.Fatal("a bucket was planned without room for all its slots")
		}
		if p := Plan(two, 7*mb+1, 0); len(p.Buckets["p"]) != 1 || p.Predicted["p"] != 7*mb {
			t.Fatalf("with room for both slots: %v %v", p.Buckets, p.Predicted)
		}
	})
	t.Run("outside and executables", func(t *testing.T) {
		c := cost(bk(1), mb, 0, 2)
		c.Outside, c.Executable = alloc.SegmentSize, 1000
		p := Plan(map[string]map[BucketKey]CaptureCost{"p": {bk(1): c}}, 1<<30, 0)
		if p.Outside["p"] != 2*(alloc.SegmentSize+1000) {
			t.Fatalf("outside %d", p.Outside["p"])
		}
		// Reusable executable memory is not charged again.
		p = Plan(map[string]map[BucketKey]CaptureCost{"p": {bk(1): c}}, mb/2+mb+2*alloc.SegmentSize+500, 2000)
		if len(p.Buckets["p"]) != 1 {
			t.Fatalf("reusable executable memory was charged: %v", p.Why)
		}
	})
	t.Run("order independence", func(t *testing.T) {
		a := Plan(map[string]map[BucketKey]CaptureCost{"x": decode, "y": prefill}, 20*mb+7*mb, 0)
		b := Plan(map[string]map[BucketKey]CaptureCost{"y": decode, "x": prefill}, 20*mb+7*mb, 0)
		if !slices.Equal(a.Buckets["x"], b.Buckets["y"]) || !slices.Equal(a.Buckets["y"], b.Buckets["x"]) {
			t.Fatalf("naming the pools the other way round changed the plan: %v / %v", a.Buckets, b.Buckets)
		}
		for i := 0; i < 20; i++ {
			c := Plan(pools, 20*mb+7*mb, 0)
			if fmt.Sprint(c.Buckets) != fmt.Sprint(Plan(pools, 20*mb+7*mb, 0).Buckets) {
				t.Fatal("the plan depends on map order")
			}
		}
	})
}

// Static outputs cost what the allocator holds for them: small ones share
// segments, so a bucket of small outputs costs their rounded bytes, not a
// segment; and the plan packs every chosen slot's outputs together, as the
// allocator will, so its prediction is what the captured runner holds.
func TestOutputsCostWhatTheAllocatorHolds(t *testing.T) {
	n := newFakeNode(t, false)
	r := newRunner(t, n, []*Config{small()}, Options{})
	costs, err := r.Size(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// "y" and "next" are a few hundred bytes each.
	c := costs[bk(4)]
	if len(c.Outputs) != 2 || c.Outside != alloc.RoundUp(c.Outputs[0])+alloc.RoundUp(c.Outputs[1]) || c.Outside >= alloc.SegmentSize {
		t.Fatalf("outside %d for outputs %v, want their rounded bytes", c.Outside, c.Outputs)
	}
	p := Plan(map[string]map[BucketKey]CaptureCost{"p": costs}, 1<<30, 0)
	planned := map[BucketKey]bool{}
	for _, k := range p.Buckets["p"] {
		planned[k] = true
	}
	if err := r.Capture(context.Background(), planned); err != nil {
		t.Fatal(err)
	}
	if len(r.Buckets()) != 3 || p.Outside["p"] != r.OutsideMemory() {
		t.Fatalf("%d buckets; outside predicted %d, held %d", len(r.Buckets()), p.Outside["p"], r.OutsideMemory())
	}
	// A large output holds its whole segment when the remainder is too
	// small to split off (1.5 MiB: 2 MiB), and shares one otherwise.
	large := CaptureCost{Bucket: bk(8), Peak: 1, Graph: 1, Slots: 2, Outputs: []int64{3 << 19}, Outside: alloc.SegmentSize}
	lp := Plan(map[string]map[BucketKey]CaptureCost{"p": {bk(8): large}}, 1<<30, 0)
	if lp.Outside["p"] != 2*alloc.SegmentSize {
		t.Fatalf("two 1.5 MiB outputs: outside %d, want two segments", lp.Outside["p"])
	}
}

func TestRanksCaptureOnlyWhatAllPlanned(t *testing.T) {
	group := comm.NewLocal(2)
	runners := make([]*Runner, 2)
	for i := range runners {
		n := newFakeNode(t, false)
		runners[i] = newRunner(t, n, []*Config{small()}, Options{Group: group[i]})
	}
	plans := []map[BucketKey]bool{{bk(4): true, bk(2): true}, {bk(2): true, bk(1): true}}
	var wg sync.WaitGroup
	got := make([]map[BucketKey]bool, 2)
	for i := range runners {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			agreed, err := runners[i].AgreePlan(context.Background(), plans[i])
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = agreed
			if err := runners[i].Capture(context.Background(), agreed); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	for i, r := range runners {
		if len(got[i]) != 1 || !got[i][bk(2)] {
			t.Fatalf("rank %d agreed on %v, want only bs=2", i, got[i])
		}
		if b := r.Buckets(); len(b) != 1 || b[0] != bk(2) {
			t.Fatalf("rank %d captured %v", i, b)
		}
	}
}

func TestNoGraphsKeepsTheLargestAsCap(t *testing.T) {
	n := newFakeNode(t, false)
	r := newRunner(t, n, []*Config{small()}, Options{})
	if err := r.Capture(context.Background(), map[BucketKey]bool{}); err != nil {
		t.Fatal(err)
	}
	if len(r.Buckets()) != 0 || r.MaxBatchSizeFor("decode") != 4 {
		t.Fatalf("no graphs: cap %d, want the largest bucket's 4", r.MaxBatchSizeFor("decode"))
	}
}

// Buckets still to capture (a background capture's queue) count toward
// the cap as if captured; buckets of a config that does not cap, or never
// declared, do not.
func TestMaxBatchSizeForCountsBucketsToCome(t *testing.T) {
	n := newFakeNode(t, false)
	subset := small()
	subset.KeyInfo, subset.BatchSizes, subset.CapEagerBatch = "subset", []int{8}, false
	r := newRunner(t, n, []*Config{small(), subset}, Options{})
	if err := r.Capture(context.Background(), map[BucketKey]bool{bk(1): true}); err != nil {
		t.Fatal(err)
	}
	subset8 := BucketKey{Walk: "decode", BatchSize: 8, Tokens: 8, Key: "subset"}
	for _, c := range []struct {
		name   string
		toCome []BucketKey
		want   int
	}{
		{"captured only", nil, 1},
		{"the 2-row bucket to come", []BucketKey{bk(2)}, 2},
		{"every bucket to come", []BucketKey{bk(2), bk(4)}, 4},
		{"a config that does not cap", []BucketKey{subset8}, 1},
		{"a bucket never declared", []BucketKey{bk(16)}, 1},
	} {
		if got := r.MaxBatchSizeFor("decode", c.toCome...); got != c.want {
			t.Errorf("%s: MaxBatchSizeFor = %d, want %d", c.name, got, c.want)
		}
	}
}
