package engine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/engine"
)

// Four choices of one prompt prefill it once (the prompt's tokens
// counted once), share its pages while they run, and each equals the same
// request alone with its seed, eager and replayed, with and without
// penalties; a cancelled first choice leaves the others running.
func TestChoicesSharePrefill(t *testing.T) {
	mo := testModel
	mo.LogProbGraphs, mo.PenaltyGraphs = true, true
	for _, graphs := range []bool{false, true} {
		s := start(t, graphs, engine.Options{PageSize: 4}, mo)
		// A prompt whose last position is inside a page (that page copied
		// for each fork), and one whose last position starts a page.
		for k, prompt := range [][]int32{{1, 403, 407, 261, 378, 300, 301}, {1, 403, 407, 261, 378, 300, 301, 302, 303}} {
			for _, pen := range []engine.Penalties{{}, {Repetition: 1.3, Frequency: 0.4, LogitBias: map[int32]float32{300: 3}}}[k : k+1] {
				req := engine.Request{Prompt: prompt, MaxTokens: 12, Sampling: engine.Sampling{Temperature: 1}, Penalties: pen, LogProbs: true, TopLogProbs: 2}
				seeds := []uint64{5, 6, 7, 8}
				before := s.e.Stats().PrefillTokens
				hs, err := s.e.SubmitChoices(context.Background(), req, seeds)
				if err != nil {
					t.Fatal(err)
				}
				got := make([][]engine.Output, len(hs))
				for i, h := range hs {
					for o := range h.Outputs() {
						got[i] = append(got[i], o)
					}
				}
				if n := s.e.Stats().PrefillTokens - before; n != int64(len(prompt)) {
					t.Fatalf("graphs %v: 4 choices prefilled %d tokens, the prompt is %d", graphs, n, len(prompt))
				}
				distinct := map[string]bool{}
				for i, sd := range seeds {
					one := req
					one.Sampling.Seed = sd
					alone := penaltyRun(t, s.e, one)[0]
					if len(alone) != len(got[i]) {
						t.Fatalf("graphs %v choice %d: %d outputs, alone %d", graphs, i, len(got[i]), len(alone))
					}
					for j := range alone {
						a, b := alone[j], got[i][j]
						if a.Token != b.Token || a.LogProb != b.LogProb || !slices.Equal(a.TopLogProbs, b.TopLogProbs) || a.Reason != b.Reason || b.Err != nil {
							t.Fatalf("graphs %v, %d-token prompt, choice %d output %d: %+v, alone %+v", graphs, len(prompt), i, j, b, a)
						}
					}
					distinct[string(fmtTokens(outTokens(got[i])))] = true
				}
				if len(distinct) < 2 {
					t.Errorf("graphs %v: the four choices are all alike", graphs)
				}
			}
		}
		waitPagesFree(t, s.e, fmt.Sprintf("graphs %v: after every request ended", graphs))
	}
}

func fmtTokens(toks []int32) []byte {
	var b []byte
	for _, t := range toks {
		b = append(b, byte(t), byte(t>>8), ',')
	}
	return b
}

// A first choice cancelled before it runs hands the prompt to the next.
func TestChoicesCancelFirst(t *testing.T) {
	s := start(t, false, engine.Options{}, testModel)
	hs, err := s.e.SubmitChoices(context.Background(), engine.Request{Prompt: []int32{1, 403, 407}, MaxTokens: 5, Sampling: engine.Sampling{Temperature: 1}}, []uint64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	hs[0].Cancel()
	for i, h := range hs {
		var last engine.Output
		tokens := 0
		for o := range h.Outputs() {
			if !o.Done {
				tokens++
			}
			last = o
		}
		// The first may have run before its cancel arrived; the others
		// must not be taken down with it.
		if !last.Done || i > 0 && (last.Reason != "length" && last.Reason != "stop" || tokens == 0) {
			t.Errorf("choice %d ended %+v after %d tokens", i, last, tokens)
		}
	}
	if st := s.e.Stats(); st.Waiting != 0 {
		t.Errorf("%d requests still counted waiting", st.Waiting)
	}
}

// waitPagesFree waits for e's published page count to reach 0: the loop
// publishes it after the step in which the last request finished, so a
// reader may briefly see the count from that step's start.
func waitPagesFree(t *testing.T, e *engine.Engine, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); e.Stats().KVPagesUsed != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d KV pages still used", what, e.Stats().KVPagesUsed)
		}
	}
}
