package engine_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/engine"
)

// Log probabilities equal a float64 log-softmax of the eager logits within
// 1e-5, the top ones in order; replayed (the KeyLogProbs variant) they equal
// eager bit for bit; a batch that asks for none replays the plain graph.
func TestLogProbs(t *testing.T) {
	mo := testModel
	mo.Logits, mo.LogProbGraphs = true, true
	g := start(t, true, engine.Options{}, mo)
	eager := start(t, false, engine.Options{}, mo)
	prompt := []int32{1, 403, 407, 261, 378}
	req := engine.Request{Prompt: prompt, MaxTokens: 8, LogProbs: true, TopLogProbs: 5,
		Sampling: engine.Sampling{Temperature: 0.8, Seed: 3}}
	collect := func(e *engine.Engine) []engine.Output {
		h, err := e.Submit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var outs []engine.Output
		for o := range h.Outputs() {
			if o.Done {
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				break
			}
			outs = append(outs, o)
		}
		return outs
	}
	before := g.e.GraphStats()
	got, want := collect(g.e), collect(eager.e)
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("%d outputs replayed, %d eager", len(got), len(want))
	}
	seq := slices.Clone(prompt)
	for i, o := range got {
		w := want[i]
		if o.Token != w.Token || o.LogProb != w.LogProb || !o.HasLogProb || !slices.Equal(o.TopLogProbs, w.TopLogProbs) {
			t.Fatalf("token %d: replayed %+v, eager %+v", i, o, w)
		}
		res, err := eager.e.Prefill(context.Background(), [][]int32{seq}, true)
		if err != nil {
			t.Fatal(err)
		}
		x := res.Logits[0]
		m := float64(slices.Max(x))
		sum := 0.0
		for _, v := range x {
			sum += math.Exp(float64(v) - m)
		}
		lp := func(tok int32) float64 { return float64(x[tok]) - m - math.Log(sum) }
		if d := math.Abs(float64(o.LogProb) - lp(o.Token)); d > 1e-5 {
			t.Errorf("token %d (%d): log-probability %v, log-softmax %v", i, o.Token, o.LogProb, lp(o.Token))
		}
		if len(o.TopLogProbs) != 5 {
			t.Fatalf("token %d: %d top log probabilities", i, len(o.TopLogProbs))
		}
		for j, tl := range o.TopLogProbs {
			if d := math.Abs(float64(tl.LogProb) - lp(tl.Token)); d > 1e-5 {
				t.Errorf("token %d top %d (%d): %v, log-softmax %v", i, j, tl.Token, tl.LogProb, lp(tl.Token))
			}
			for v := range x {
				if x[v] > x[tl.Token] && !slices.ContainsFunc(o.TopLogProbs[:j], func(p engine.TokenLogProb) bool { return p.Token == int32(v) }) {
					t.Fatalf("token %d top %d is %d, but %d is larger and not above it", i, j, tl.Token, v)
				}
			}
		}
		seq = append(seq, o.Token)
	}

	// The decode steps replayed the variant; a plain request replays the
	// plain graph and carries no log probabilities.
	replays := func(gs engine.GraphStats, logprobs bool) int64 {
		n := int64(0)
		for _, r := range gs.Runners {
			for _, b := range r.Buckets {
				if strings.HasPrefix(b.Bucket, "decode") && strings.Contains(b.Bucket, "key="+engine.KeyLogProbs) == logprobs {
					n += b.Replays
				}
			}
		}
		return n
	}
	mid := g.e.GraphStats()
	if replays(mid, true) <= replays(before, true) || replays(mid, false) != replays(before, false) {
		t.Errorf("log-probability decode replays %d -> %d, plain %d -> %d", replays(before, true), replays(mid, true),
			replays(before, false), replays(mid, false))
	}
	req.LogProbs, req.TopLogProbs = false, 0
	plain := collect(g.e)
	if after := g.e.GraphStats(); replays(after, false) <= replays(mid, false) || replays(after, true) != replays(mid, true) {
		t.Errorf("a plain request: log-probability replays %d -> %d, plain %d -> %d", replays(mid, true), replays(after, true),
			replays(mid, false), replays(after, false))
	}
	for i, o := range plain {
		if o.HasLogProb || o.TopLogProbs != nil || o.Token != got[i].Token {
			t.Fatalf("plain token %d: %+v, with log probabilities %+v", i, o, got[i])
		}
	}

	if _, err := g.e.Submit(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 1, LogProbs: true, TopLogProbs: 21}); err == nil {
		t.Error("21 top log probabilities accepted")
	}
}
