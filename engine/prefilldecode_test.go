package engine_test

import (
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/engine"
)

// The raw distribution after the last prompt token is the same, bit for
// bit, whether that token was prefilled with the prompt or decoded after
// the rest of it: what lets the choices of one prompt share its prefill.
func TestPrefillEqualsDecodeOfLastToken(t *testing.T) {
	mo := testModel
	mo.LogProbGraphs, mo.PenaltyGraphs = true, true
	// Eager here; TestChoicesSharePrefill checks replays through forks.
	for _, graphs := range []bool{false} {
		s := start(t, graphs, engine.Options{}, mo)
		for _, prompt := range [][]int32{{1, 403, 407, 261, 378}, {1, 403, 407, 261, 378, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312}} {
			p := len(prompt)
			a := penaltyRun(t, s.e, engine.Request{Prompt: prompt, MaxTokens: 1, LogProbs: true, TopLogProbs: 20})[0]
			b := penaltyRun(t, s.e, engine.Request{Prompt: prompt[:p-1], MaxTokens: 2, LogProbs: true, TopLogProbs: 20,
				Penalties: engine.Penalties{LogitBias: map[int32]float32{prompt[p-1]: 100}}})[0]
			if b[0].Token != prompt[p-1] {
				t.Fatalf("biased first token %d", b[0].Token)
			}
			if !slices.Equal(a[0].TopLogProbs, b[1].TopLogProbs) {
				t.Errorf("graphs %v, %d tokens: prefilled %v, decoded %v", graphs, p, a[0].TopLogProbs[:3], b[1].TopLogProbs[:3])
			}
		}
	}
}
