package engine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/model/llama2c"
)

// wideModel has a tiny body and a wide vocabulary, so that its largest eager
// step (the floor: a decode of 64 rows, whose logits and probabilities are
// [64, vocab]) is larger than the memory the planner overestimates per
// bucket (small static outputs are costed as whole segments). Prefill is
// never captured; decode is captured for 1 and 64 requests.
var (
	wideConfig  = llama2c.Config{Dim: 32, Hidden: 64, Layers: 1, Heads: 2, KVHeads: 2, Vocab: 65536, SeqLen: 64, SharedClassifier: true}
	wideOptions = llama.Options{Prefill: llama.PrefillEager, DecodeBatchSizes: []int{1, 64}}
)

// startWide starts an engine of wideModel on a CPU device of capacity bytes,
// with a fixed KV cache and the whole device as the plan's budget.
func startWide(t *testing.T, capacity int64, graphs bool) (*engine.Engine, accel.Device) {
	t.Helper()
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	m, err := llama.New(dev, s, llama.RandomCheckpoint(wideConfig, 1), wideOptions)
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	e, err := engine.New(dev, m, engine.Options{Graphs: graphs, PlanCache: "off", KVPages: 65, MemoryFraction: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e, dev
}

// freeBeside is the device memory an eager step can still take, read on the
// loop between steps: what the device has not handed out plus what the
// allocator's default pool caches unused (given back on demand).
func freeBeside(t *testing.T, e *engine.Engine, dev accel.Device) int64 {
	t.Helper()
	var free int64
	if err := e.OnLoop(context.Background(), func() {
		st := dev.Allocator().Stats()
		cached := (st.Reserved - st.PoolReserved) - (st.Allocated - st.PoolAllocated)
		free = dev.MemInfo().Free + cached
	}); err != nil {
		t.Fatal(err)
	}
	return free
}

// A plan under a tight budget keeps the floor free: the graphs' pool is what
// the plan predicted, the device still has the floor free after Start, and
// every request the engine batches then runs beside the graphs without
// running out of memory and gives the eager engine's tokens. The plan leaves
// the 64-request bucket out, so the batch cap falls to the one-request
// bucket (issue 19, item 8): decodes split into one-request replays rather
// than running eager at 64 rows.
func TestTightPlanKeepsFloorFree(t *testing.T) {
	// A roomy device measures the costs the tight one will plan with.
	roomy, dev := startWide(t, 1<<30, true)
	rp := roomy.Plan()
	if rp == nil || rp.Plan.Count() != rp.Buckets() || rp.Buckets() != 2 {
		t.Fatalf("a roomy device planned %+v, want both decode buckets", rp)
	}
	floor := rp.Plan.Floor
	costs := map[string]map[graph.BucketKey]graph.CaptureCost{}
	for _, p := range rp.Pools {
		costs[p.Name] = map[graph.BucketKey]graph.CaptureCost{}
		for _, c := range p.Costs {
			costs[p.Name][c.Bucket] = c
		}
	}
	// Room for every graph (and the rest of the segments their outputs
	// open) and an eighth of the floor: the floor alone keeps the
	// 64-request bucket out.
	budget := rp.Plan.Total() + rp.Plan.Reserve + floor/8
	big := graph.BucketKey{Walk: engine.WalkDecode, BatchSize: 64, Tokens: 64}
	if with, without := graph.Plan(costs, budget, 0), graph.Plan(costs, budget+floor, 0); with.Count() != 1 || without.Count() != 2 {
		t.Fatalf("the test needs a budget where the floor alone leaves %v out: %d bytes plan %v, without the floor %v",
			big, budget, with.Buckets, without.Buckets)
	}
	// What the engine holds before it plans (weights, KV cache, graph
	// buffers) is the same on any device: the tight device has the budget
	// beside it.
	used := dev.MemInfo().Total - rp.Plan.Free
	tight, tdev := startWide(t, used+budget, true)
	tp := tight.Plan()
	if tp.Plan.Free != budget {
		t.Fatalf("the tight device's plan had %d bytes, want %d", tp.Plan.Free, budget)
	}
	if tp.Plan.Floor != floor {
		t.Fatalf("the tight device's floor is %d, the roomy one's %d", tp.Plan.Floor, floor)
	}
	if n := tp.Plan.Count(); n == 0 || n >= tp.Buckets() || slices.Contains(tp.Plan.Buckets["graphs"], big) {
		t.Fatalf("a budget with room for one bucket beside the floor planned %v (why not: %v)", tp.Plan.Buckets, tp.Why)
	}
	// Executable memory the plan reuses from the measured copies is held
	// already, outside the budget.
	if tp.Plan.Total()+tp.Plan.Floor+tp.Plan.Reserve-tp.Reusable > tp.Plan.Free {
		t.Fatalf("the plan (%d), floor (%d) and reserve (%d) less what it reuses (%d) exceed the budget %d",
			tp.Plan.Total(), tp.Plan.Floor, tp.Plan.Reserve, tp.Reusable, tp.Plan.Free)
	}
	for _, p := range tp.Pools {
		if pred := tp.Plan.Predicted[p.Pool]; p.Actual != pred {
			t.Fatalf("pool %s: predicted %d, capture took %d", p.Name, pred, p.Actual)
		}
	}
	if free := freeBeside(t, tight, tdev); free < floor {
		t.Fatalf("after a tight capture the device has %d bytes free, less than the %d-byte floor (plan %v, predicted %d of a %d-byte budget)",
			free, floor, tp.Plan.Buckets, tp.Plan.Total(), tp.Plan.Free)
	}

	// Every request submitted together: they run one at a time, each
	// decode a replay of the one-request bucket. Four tokens each (three
	// decodes) are enough for that; twelve took most of the test's -race
	// time, a 65536-wide classifier per token.
	reqs := make([]engine.Request, 64)
	for i := range reqs {
		reqs[i] = engine.Request{Prompt: []int32{1, int32(100 + 37*i), int32(5000 + 11*i)}, MaxTokens: 4}
	}
	eager, _ := startWide(t, 1<<30, false)
	want := submitTogether(t, eager, reqs)
	var base int64
	if err := tight.OnLoop(context.Background(), func() {
		tdev.Allocator().ResetPeak()
		base = tdev.Allocator().Stats().Allocated
	}); err != nil {
		t.Fatal(err)
	}
	got := collect(t, tight, reqs)
	for i := range reqs {
		if got[i].err != nil {
			t.Fatalf("request %d beside a tight capture: %v", i, got[i].err)
		}
		if !slices.Equal(got[i].toks, want[i]) {
			t.Fatalf("request %d beside a tight capture gave %v, the eager engine %v", i, got[i].toks, want[i])
		}
	}
	if peak := tdev.Allocator().Stats().PeakAllocated - base; peak > floor {
		t.Fatalf("the batch's largest step took %d bytes, more than the %d-byte floor", peak, floor)
	}
	if n, m := stepCount(tight, engine.WalkDecode, false), stepCount(tight, engine.WalkDecode, true); n != 0 || m == 0 {
		t.Fatalf("decode steps: %d eager, %d replayed; want every one replayed under the lowered batch cap", n, m)
	}
	if st := tdev.Allocator().Stats(); st.NumOOM != 0 {
		t.Fatalf("the allocator counted %d out-of-memory failures", st.NumOOM)
	}
}

type result struct {
	toks []int32
	err  error
}

// collect submits reqs between two steps and returns each one's tokens and
// error, without stopping at the first error.
func collect(t *testing.T, e *engine.Engine, reqs []engine.Request) []result {
	t.Helper()
	hs := submitOnLoop(t, e, reqs)
	out := make([]result, len(reqs))
	for i, h := range hs {
		out[i].toks, out[i].err = drain(h)
	}
	return out
}
