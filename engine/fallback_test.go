package engine_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
	"github.com/reprise-ml/reprise/model/llama"
)

// submitTogether submits reqs from the loop, between two steps, so the next
// step sees them all at once, and collects each one's tokens.
func submitTogether(t *testing.T, e *engine.Engine, reqs []engine.Request) [][]int32 {
	t.Helper()
	return tokensOf(t, submitOnLoop(t, e, reqs))
}

// submitOnLoop submits reqs from the loop, between two steps.
func submitOnLoop(t *testing.T, e *engine.Engine, reqs []engine.Request) []*engine.Handle {
	t.Helper()
	ctx := context.Background()
	hs := make([]*engine.Handle, len(reqs))
	var serr error
	if err := e.OnLoop(ctx, func() {
		for i, req := range reqs {
			if hs[i], serr = e.Submit(ctx, req); serr != nil {
				return
			}
		}
	}); err != nil || serr != nil {
		t.Fatalf("submit: %v %v", err, serr)
	}
	return hs
}

// stepCount is the steps of walk that ran in mode (replayed or eager).
func stepCount(e *engine.Engine, walk string, replay bool) int64 {
	for _, st := range e.Stats().Steps {
		if st.Walk == walk && st.Replay == replay {
			return st.Steps
		}
	}
	return 0
}

// A step of a captured walk that no captured bucket fits runs eager, and the
// runner counts it by walk and reason (what /metrics publishes as
// reprise_graph_eager_fallbacks_total): exactly one count per such step,
// none for a step that replays, and the tokens stay the eager engine's.
func TestEagerFallbacksByReason(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	prompt := func(n int) []int32 {
		p := make([]int32, n)
		p[0] = 1
		for i := 1; i < n; i++ {
			p[i] = int32(3 + rng.IntN(500))
		}
		return p
	}
	req := func(n, maxTokens int) engine.Request {
		return engine.Request{Prompt: prompt(n), MaxTokens: maxTokens}
	}

	t.Run("whole prefill", func(t *testing.T) {
		// Prefill captured whole, for at most 2 prompts of at most 32
		// tokens; decode for up to 4 requests (which caps the batch at 4).
		mo := llama.Options{Prefill: llama.PrefillWhole, PrefillLengths: []int{16, 32}, PrefillBatchSizes: []int{1, 2},
			DecodeBatchSizes: []int{1, 2, 4}}
		groups := []fallbackGroup{
			{"two short prompts: a captured prefill bucket", []engine.Request{req(5, 6), req(9, 4)}},
			{"four short prompts: more than any prefill bucket", []engine.Request{req(3, 5), req(7, 7), req(4, 3), req(10, 6)}},
			{"a prompt of 40 tokens: more than any prefill bucket of 1", []engine.Request{req(40, 5)}},
			{"two prompts of 20 tokens: more than any prefill bucket of 2", []engine.Request{req(20, 4), req(20, 5)}},
		}
		want := []graph.FallbackStats{
			{Walk: engine.WalkPrefill, Reason: "batch larger than any capture", Steps: 1},
			{Walk: engine.WalkPrefill, Reason: "more tokens than any capture of the batch", Steps: 2},
		}
		checkFallbacks(t, mo, groups, "graphs", want, 1)
	})

	t.Run("piecewise prefill", func(t *testing.T) {
		// The prefill's block loop is a region captured for at most 8
		// prompts of at most 64 tokens; the whole-step runner captures
		// decode only, so it counts no prefill.
		groups := []fallbackGroup{
			{"a prompt of 30 tokens: a captured region bucket", []engine.Request{req(30, 5)}},
			{"a prompt of 70 tokens: more than any region bucket", []engine.Request{req(70, 4)}},
			{"three prompts of 30 tokens: more than any region bucket", []engine.Request{req(30, 3), req(30, 6), req(30, 4)}},
		}
		want := []graph.FallbackStats{{Walk: llama.WalkBlocks, Reason: "no shape fits", Steps: 2}}
		checkFallbacks(t, testModel, groups, llama.RegionBlocks, want, 1)
	})

	t.Run("decode bucket not planned", func(t *testing.T) {
		// Decode captured for 1, 2 and 4 requests, but the 4-request
		// bucket's measured cost, as the plan cache holds it, is larger
		// than the device: the plan leaves it out, the batch cap falls to
		// the largest bucket captured (2), and decodes of 3 or 4 requests
		// split into batches of 2 that replay instead of running eager
		// (issue 19, item 8: the cap used to be read before capture).
		mo := llama.Options{PrefillLengths: []int{16, 32}, PrefillBatchSizes: []int{1, 4}, DecodeBatchSizes: []int{1, 2, 4}}
		big := graph.BucketKey{Walk: engine.WalkDecode, BatchSize: 4, Tokens: 4}
		cache := t.TempDir()
		full := start(t, true, engine.Options{PlanCache: cache}, mo)
		file := full.e.Plan().Pool("graphs").CacheFile
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var pc struct {
			Key   string              `json:"key"`
			Costs []graph.CaptureCost `json:"costs"`
		}
		if err := json.Unmarshal(b, &pc); err != nil {
			t.Fatal(err)
		}
		found := false
		for i := range pc.Costs {
			if pc.Costs[i].Bucket == big {
				pc.Costs[i].Kept, pc.Costs[i].Graph, found = 1<<50, 1<<50, true
			}
		}
		if b, err = json.Marshal(pc); err != nil || !found {
			t.Fatalf("no cost of %v in %s (%v)", big, file, err)
		}
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
		s := start(t, true, engine.Options{PlanCache: cache}, mo)
		if p := s.e.Plan(); !p.Pool("graphs").FromCache || !strings.Contains(p.Why[big.String()], "does not fit") {
			t.Fatalf("the plan did not leave %v out for its cost: from cache %v, why not %q", big, p.Pool("graphs").FromCache, p.Why)
		}
		if live := s.e.Runner().Buckets(); slices.Contains(live, big) || len(live) != 2 {
			t.Fatalf("decode buckets live: %v, want those of 1 and 2 requests", live)
		}

		eager := start(t, false, engine.Options{}, mo)
		reqs := []engine.Request{req(5, 9), req(12, 4), req(7, 12), req(3, 6)}
		got := submitTogether(t, s.e, reqs)
		var lens []int
		for i, r := range reqs {
			alone := runAll(t, eager.e, []job{{req: r}})[0]
			if !slices.Equal(got[i], alone) {
				t.Errorf("request %d gave\n%v\nalone and eager:\n%v", i, got[i], alone)
			}
			lens = append(lens, len(alone))
		}
		if slices.Max(lens) < 3 || len(lens) < 3 {
			t.Fatalf("requests of %v tokens: the test needs decode steps of more than 2 requests", lens)
		}
		if tel := s.e.Runner().Telemetry(); len(tel.Fallbacks) != 0 {
			t.Errorf("requests of %v tokens: eager fallbacks %+v, want none (batches of at most 2)", lens, tel.Fallbacks)
		}
		if n, m := stepCount(s.e, engine.WalkDecode, false), stepCount(s.e, engine.WalkDecode, true); n != 0 || m == 0 {
			t.Errorf("decode steps: %d eager and %d replayed, want none eager", n, m)
		}
	})
}

// fallbackGroup is requests submitted at once: they run as one prefill step.
type fallbackGroup struct {
	what string
	reqs []engine.Request
}

// checkFallbacks runs each group on a captured engine of mo, one group after
// the other, and checks that the tokens are those of each request alone on
// an eager engine, that the runner called pool counted exactly want, that
// no other runner counted any fallback (decode always fits a bucket), and
// that every prefill step either replayed a bucket of want's walk (replays
// of them) or was counted once.
func checkFallbacks(t *testing.T, mo llama.Options, groups []fallbackGroup, pool string, want []graph.FallbackStats, replays int64) {
	t.Helper()
	eager := start(t, false, engine.Options{}, mo)
	s := start(t, true, engine.Options{}, mo)
	for _, g := range groups {
		got := submitTogether(t, s.e, g.reqs)
		for i, req := range g.reqs {
			alone := runAll(t, eager.e, []job{{req: req}})[0]
			if !slices.Equal(got[i], alone) {
				t.Errorf("%s: request %d gave\n%v\nalone and eager:\n%v", g.what, i, got[i], alone)
			}
		}
	}
	runners := s.e.Runners()
	if runners[pool] == nil {
		t.Fatalf("no runner %q among %v", pool, runners)
	}
	for name, r := range runners {
		tel := r.Telemetry()
		if name != pool {
			if len(tel.Fallbacks) != 0 {
				t.Errorf("runner %s counted eager fallbacks %+v, want none", name, tel.Fallbacks)
			}
			continue
		}
		if !slices.Equal(tel.Fallbacks, want) {
			t.Errorf("runner %s counted eager fallbacks\n%+v\nwant\n%+v", name, tel.Fallbacks, want)
		}
		counted, replayed := int64(0), int64(0)
		for _, f := range tel.Fallbacks {
			counted += f.Steps
		}
		for _, b := range tel.Buckets {
			if strings.HasPrefix(b.Bucket, want[0].Walk+"[") {
				replayed += b.Replays
			}
		}
		if replayed != replays || counted+replayed != int64(len(groups)) {
			t.Errorf("runner %s: %d %s steps replayed (want %d) and %d counted eager, for %d prefill steps: %+v",
				name, replayed, want[0].Walk, replays, counted, len(groups), tel.Buckets)
		}
	}
	if n := stepCount(s.e, engine.WalkDecode, false); n != 0 {
		t.Errorf("%d decode steps ran eager, want every one replayed", n)
	}
	if n := stepCount(s.e, engine.WalkPrefill, false) + stepCount(s.e, engine.WalkPrefill, true); n != int64(len(groups)) {
		t.Errorf("%d prefill steps, want one per group (%d)", n, len(groups))
	}
}
