package engine_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/engine"
)

// penaltyRun submits reqs together and collects each one's outputs.
func penaltyRun(t *testing.T, e *engine.Engine, reqs ...engine.Request) [][]engine.Output {
	t.Helper()
	hs := make([]*engine.Handle, len(reqs))
	for i, req := range reqs {
		h, err := e.Submit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	outs := make([][]engine.Output, len(reqs))
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Go(func() {
			for o := range h.Outputs() {
				if o.Done {
					if o.Err != nil {
						t.Error(o.Err)
					}
					outs[i] = append(outs[i], o)
					return
				}
				outs[i] = append(outs[i], o)
			}
		})
	}
	wg.Wait()
	return outs
}

func outTokens(outs []engine.Output) []int32 {
	var toks []int32
	for _, o := range outs {
		if !o.Done {
			toks = append(toks, o.Token)
		}
	}
	return toks
}

// Greedy decoding with a repetition, presence and frequency penalty and a
// logit bias picks, at every step, the argmax of the eager logits of the
// sequence so far processed by hand from the definitions (vLLM's): seen
// tokens' positive logits divided by the repetition penalty, the others
// multiplied; frequency × count and presence × [count > 0] over the output
// subtracted; the bias added. Replayed (the KeyPenalties variant), the
// tokens are the eager ones.
func TestPenaltiesByHand(t *testing.T) {
	mo := testModel
	mo.Logits, mo.PenaltyGraphs = true, true
	g := start(t, true, engine.Options{}, mo)
	eager := start(t, false, engine.Options{}, mo)
	prompt := []int32{1, 403, 407, 261, 378}
	plain := engine.Request{Prompt: prompt, MaxTokens: 10, Sampling: engine.Sampling{Temperature: 0}}
	base := outTokens(penaltyRun(t, eager.e, plain)[0])

	// Bias the second most likely first token above the first.
	res, err := eager.e.Prefill(context.Background(), [][]int32{prompt}, true)
	if err != nil {
		t.Fatal(err)
	}
	x := res.Logits[0]
	order := make([]int32, len(x))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		if x[a] > x[b] {
			return -1
		} else if x[a] < x[b] {
			return 1
		}
		return 0
	})
	boost := order[1]
	pen := engine.Penalties{Repetition: 1.6, Presence: 0.4, Frequency: 0.3,
		LogitBias: map[int32]float32{boost: x[order[0]] - x[boost] + 0.5, order[2]: -100}}
	req := plain
	req.Penalties = pen

	want := func(seq []int32, outN int) int32 {
		res, err := eager.e.Prefill(context.Background(), [][]int32{seq}, true)
		if err != nil {
			t.Fatal(err)
		}
		x := res.Logits[0]
		seen := map[int32]bool{}
		for _, tk := range seq {
			seen[tk] = true
		}
		count := map[int32]int{}
		for _, tk := range seq[len(seq)-outN:] {
			count[tk]++
		}
		best, bestV := int32(-1), math.Inf(-1)
		for i, v := range x {
			tk := int32(i)
			z := float64(v) + float64(pen.LogitBias[tk])
			if seen[tk] {
				if z > 0 {
					z /= float64(pen.Repetition)
				} else {
					z *= float64(pen.Repetition)
				}
			}
			z -= float64(pen.Frequency) * float64(count[tk])
			if count[tk] > 0 {
				z -= float64(pen.Presence)
			}
			if z > bestV {
				best, bestV = tk, z
			}
		}
		return best
	}
	got := outTokens(penaltyRun(t, eager.e, req)[0])
	if len(got) == 0 || got[0] != boost {
		t.Fatalf("first token %v, want the biased %d", got, boost)
	}
	seq := slices.Clone(prompt)
	for i, tk := range got {
		if w := want(seq, i); tk != w {
			t.Fatalf("token %d: %d, by hand %d (tokens %v)", i, tk, w, got)
		}
		seq = append(seq, tk)
	}
	if slices.Equal(got, base) {
		t.Fatalf("the penalties changed nothing: %v", got)
	}

	before := g.e.GraphStats()
	if replayed := outTokens(penaltyRun(t, g.e, req)[0]); !slices.Equal(replayed, got) {
		t.Fatalf("replayed %v, eager %v", replayed, got)
	}
	if n := keyReplays(g.e.GraphStats(), engine.KeyPenalties) - keyReplays(before, engine.KeyPenalties); n == 0 {
		t.Error("no decode step replayed the penalties variant")
	}
	// A plain request replays the plain graph and gets the plain tokens.
	mid := g.e.GraphStats()
	if toks := outTokens(penaltyRun(t, g.e, plain)[0]); !slices.Equal(toks, base) {
		t.Fatalf("plain after penalties: %v, want %v", toks, base)
	}
	if after := g.e.GraphStats(); keyReplays(after, engine.KeyPenalties) != keyReplays(mid, engine.KeyPenalties) || keyReplays(after, "") == keyReplays(mid, "") {
		t.Error("a plain request did not replay the plain graph alone")
	}
}

// keyReplays counts decode replays of buckets of key info key.
func keyReplays(gs engine.GraphStats, key string) int64 {
	n := int64(0)
	for _, r := range gs.Runners {
		for _, b := range r.Buckets {
			if strings.HasPrefix(b.Bucket, "decode") && strings.HasSuffix(b.Bucket, "key="+key+"]") {
				n += b.Replays
			}
		}
	}
	return n
}

// min_tokens masks the stop tokens until that many tokens are out; min_p 1
// keeps only the most likely token, so sampling at any temperature is
// greedy.
func TestMinTokensAndMinP(t *testing.T) {
	mo := testModel
	mo.PenaltyGraphs = true
	for _, graphs := range []bool{false, true} {
		s := start(t, graphs, engine.Options{}, mo)
		prompt := []int32{1, 403, 407, 261, 378}
		greedy := outTokens(penaltyRun(t, s.e, engine.Request{Prompt: prompt, MaxTokens: 8})[0])
		stop := greedy[0]
		outs := penaltyRun(t, s.e,
			engine.Request{Prompt: prompt, MaxTokens: 8, StopTokens: []int32{stop}},
			engine.Request{Prompt: prompt, MaxTokens: 8, StopTokens: []int32{stop}, Penalties: engine.Penalties{MinTokens: 3}},
			engine.Request{Prompt: prompt, MaxTokens: 8, Sampling: engine.Sampling{Temperature: 1.5, Seed: 9}, Penalties: engine.Penalties{MinP: 1}},
			engine.Request{Prompt: prompt, MaxTokens: 8, Sampling: engine.Sampling{Temperature: 1.5, Seed: 9}})
		if toks := outTokens(outs[0]); len(toks) != 0 || outs[0][len(outs[0])-1].Reason != "stop" {
			t.Fatalf("graphs %v: stopping at %d gave %v", graphs, stop, outs[0])
		}
		toks := outTokens(outs[1])
		if len(toks) < 3 || slices.Contains(toks[:3], stop) {
			t.Fatalf("graphs %v: min_tokens 3 with stop %d gave %v", graphs, stop, toks)
		}
		if got := outTokens(outs[2]); !slices.Equal(got, greedy) {
			t.Fatalf("graphs %v: min_p 1 at temperature 1.5 gave %v, greedy %v", graphs, got, greedy)
		}
		if got := outTokens(outs[3]); slices.Equal(got, greedy) {
			t.Fatalf("graphs %v: temperature 1.5 without min_p is greedy too (%v): the check proves nothing", graphs, got)
		}
	}
}

// In a batch mixing requests with and without penalties (and log
// probabilities), each gets what it gets alone (replayed; and eager for
// the request asking for everything).
func TestPenaltiesMixedBatch(t *testing.T) {
	mo := testModel
	mo.PenaltyGraphs, mo.LogProbGraphs = true, true
	g := start(t, true, engine.Options{}, mo)
	eager := start(t, false, engine.Options{}, mo)
	sp := func(seed uint64) engine.Sampling { return engine.Sampling{Temperature: 0.9, Seed: seed} }
	reqs := []engine.Request{
		{Prompt: []int32{1, 403, 407}, MaxTokens: 9, Sampling: sp(1)},
		{Prompt: []int32{1, 403, 407}, MaxTokens: 9, Sampling: sp(1), Penalties: engine.Penalties{Repetition: 2, Frequency: 1.5, LogitBias: map[int32]float32{300: 8}}},
		{Prompt: []int32{1, 261, 378, 261}, MaxTokens: 7, Sampling: sp(2), LogProbs: true, TopLogProbs: 2},
		{Prompt: []int32{1, 261, 378, 261}, MaxTokens: 7, Sampling: sp(2), LogProbs: true, Penalties: engine.Penalties{Presence: 1.5, MinP: 0.05, MinTokens: 2}},
	}
	together := penaltyRun(t, g.e, reqs...)
	for i, req := range reqs {
		alone := []*setup{g}
		if i == len(reqs)-1 {
			alone = append(alone, eager) // the request with every feature, eager too
		}
		for _, s := range alone {
			alone := penaltyRun(t, s.e, req)[0]
			if len(alone) != len(together[i]) {
				t.Fatalf("request %d: %d outputs together, %d alone", i, len(together[i]), len(alone))
			}
			for j := range alone {
				a, b := alone[j], together[i][j]
				if a.Token != b.Token || a.LogProb != b.LogProb || !slices.Equal(a.TopLogProbs, b.TopLogProbs) || a.Reason != b.Reason {
					t.Fatalf("request %d output %d: %+v alone, %+v together", i, j, a, b)
				}
			}
		}
	}
	if slices.Equal(outTokens(together[0]), outTokens(together[1])) {
		t.Errorf("the penalties changed nothing: %v %v", outTokens(together[0]), outTokens(together[1]))
	}
	if keyReplays(g.e.GraphStats(), engine.KeyLogProbsPenalties) == 0 {
		t.Error("no step replayed the log probabilities and penalties variant")
	}
}

func TestPenaltiesValidate(t *testing.T) {
	s := start(t, false, engine.Options{}, testModel)
	prompt := []int32{1, 403}
	for _, p := range []engine.Penalties{
		{Repetition: -1}, {Presence: 2.5}, {Frequency: float32(math.NaN())}, {MinP: 1.5}, {MinTokens: 5},
		{LogitBias: map[int32]float32{-1: 1}}, {LogitBias: map[int32]float32{512: 1}}, {LogitBias: map[int32]float32{3: 101}},
	} {
		if err := s.e.Validate(engine.Request{Prompt: prompt, MaxTokens: 4, Penalties: p}); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}
