package llama

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama/reference"
	"github.com/reprise-ml/reprise/model/stories260k"
)

// archCase is a synthetic configuration of one architecture's maths, as a
// Hugging Face directory declares it.
type archCase struct {
	name, arch string // arch: config.json's architectures[0]
	c          reference.Config
	extra      map[string]any // more config.json fields
}

func archCases() []archCase {
	// Hugging Face's checkpoints rotate halves: the reference reads the
	// weights as written, the loader permutes them into interleaved pairs.
	base := reference.Config{Dim: 32, Hidden: 48, Layers: 2, Heads: 4, KVHeads: 2, Vocab: 40, SeqLen: 64, Eps: 1e-5, Theta: 10000, Halves: true}
	llama3 := base
	llama3.Theta = 500000
	// Llama 3.1's parameters with the original context shrunk to the test's
	// positions, so that kept, divided and blended pairs all turn.
	llama3.Scaling = &reference.Llama3Scaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 32}
	qwen2 := base
	qwen2.Theta, qwen2.Eps, qwen2.QKVBias, qwen2.Tied = 1e6, 1e-6, true, true
	qwen3 := base
	qwen3.Theta, qwen3.Eps, qwen3.QKNorm, qwen3.HeadDim = 1e6, 1e-6, true, 16
	gqa := base
	gqa.Heads, gqa.KVHeads, gqa.HeadDim, gqa.Tied = 8, 2, 6, true
	return []archCase{
		{"llama3-rope-scaling", "LlamaForCausalLM", llama3, nil},
		{"qwen2-qkv-bias-tied", "Qwen2ForCausalLM", qwen2, nil},
		{"qwen3-qk-norm-head-dim", "Qwen3ForCausalLM", qwen3, map[string]any{"attention_bias": false}},
		{"mistral-gqa4-head-dim-6-tied", "MistralForCausalLM", gqa, nil},
	}
}

// checkAgainstReference serves m eager and with graphs and holds it to the
// reference: each prompt's last logits within 1e-5 of the largest logit,
// the piecewise-replayed prefill's equal to eager bit for bit, greedy
// continuations token for token (eager, and with captured decode graphs).
func checkAgainstReference(t *testing.T, dev accel.Device, open func() *Model, prompts [][]int32, wantLogits [][]float32, wantGen [][]int32, steps int) {
	t.Helper()
	worst := 0.0
	for _, graphs := range []bool{false, true} {
		m := open()
		e, err := engine.New(dev, m, engine.Options{Graphs: graphs, MaxBatch: 2, PlanCache: "off"})
		must(t, err)
		must(t, e.Start(context.Background()))
		eager, err := e.Prefill(context.Background(), prompts, true)
		must(t, err)
		pw, err := e.Prefill(context.Background(), prompts, false)
		must(t, err)
		if graphs && !pw.Replayed {
			t.Error("the piecewise prefill did not replay")
		}
		for j := range prompts {
			d := reference.RelErr(eager.Logits[j], wantLogits[j])
			worst = max(worst, d)
			if d > 1e-5 {
				t.Errorf("graphs=%v prompt %d (%d tokens): logits differ from the reference by %.3g of the largest", graphs, j, len(prompts[j]), d)
			}
			if !slices.Equal(accel.F32Bytes(pw.Logits[j]), accel.F32Bytes(eager.Logits[j])) {
				t.Errorf("graphs=%v prompt %d: replayed logits differ from eager", graphs, j)
			}
		}
		for j, p := range prompts {
			gen, _, err := e.Generate(context.Background(), engine.Request{Prompt: p, MaxTokens: steps})
			must(t, err)
			if !slices.Equal(gen, wantGen[j]) {
				t.Errorf("graphs=%v prompt %d: greedy %v, reference %v", graphs, j, gen, wantGen[j])
			}
		}
		if graphs {
			var replays int64
			for _, b := range e.Runner().Telemetry().Buckets {
				replays += b.Replays
			}
			if replays == 0 {
				t.Error("graphs on, no decode step replayed")
			}
		}
		e.Close()
		m.Close()
	}
	t.Logf("logits within %.2g of the largest of the reference's", worst)
}

func randomPrompts(r *rand.Rand, vocab int, lengths ...int) [][]int32 {
	var ps [][]int32
	for _, n := range lengths {
		p := make([]int32, n)
		for j := range p {
			p[j] = int32(3 + r.IntN(vocab-3)) // no BOS or EOS
		}
		ps = append(ps, p)
	}
	return ps
}

// Every architecture's maths, from a Hugging Face directory the test
// writes, agrees with the float64 reference, eager and replayed: Llama 3
// rope scaling, Qwen2's q/k/v biases with tied embeddings, Qwen3's per-head
// q/k norms with head_dim 16 over a width of 32, and an 8:2 grouped-query
// Mistral with head_dim 6. The directory's rotate-half q and k (and their
// biases and norms) pass through the loader's permutation into the
// interleaved kernels.
func TestArchitecturesMatchReference(t *testing.T) {
	dev := cpuDevice(t)
	for i, ac := range archCases() {
		t.Run(ac.name, func(t *testing.T) {
			w := reference.Random(ac.c, uint64(100+i))
			dir := t.TempDir()
			must(t, reference.WriteHF(dir, ac.arch, ac.c, w, ac.extra))
			prompts := randomPrompts(rand.New(rand.NewPCG(uint64(i), 9)), ac.c.Vocab, 5, 17, 1)
			const steps = 12
			wantLogits, wantGen, err := reference.Greedy(ac.c, w, prompts, steps, 1, 2)
			must(t, err)
			open := func() *Model {
				ws, err := OpenHF(dir)
				must(t, err)
				defer ws.Close()
				s, err := dev.NewStream()
				must(t, err)
				defer s.Close()
				m, err := NewFrom(dev, s, ws, Options{Logits: true, PrefillLengths: []int{16, 32}, PrefillBatchSizes: []int{1, 4},
					DecodeBatchSizes: []int{1, 2}, StopTokens: ws.StopTokens()})
				must(t, err)
				return m
			}
			checkAgainstReference(t, dev, open, prompts, wantLogits, wantGen, steps)
		})
	}
}

// Mistral's sliding window, smaller than the declared context, caps the
// context served, said in the load's warnings; within it the attention is
// the full one, so the reference (which has none) still holds.
func TestSlidingWindowCapsContext(t *testing.T) {
	dev := cpuDevice(t)
	c := reference.Config{Dim: 32, Hidden: 48, Layers: 2, Heads: 4, KVHeads: 1, Vocab: 512, SeqLen: 48, Eps: 1e-5, Theta: 1e6, Halves: true}
	w := reference.Random(c, 7)
	dir := t.TempDir()
	must(t, reference.WriteHF(dir, "MistralForCausalLM", c, w, map[string]any{"sliding_window": 32, "max_position_embeddings": 4096}))
	tok := filepath.Join(t.TempDir(), "tokenizer.bin")
	must(t, os.WriteFile(tok, stories260k.Tokenizer(), 0o644))
	l, err := OpenSource(Source{Model: dir, Tokenizer: tok})
	must(t, err)
	defer l.Close()
	if got := l.Weights.Config().SeqLen; got != 32 {
		t.Fatalf("context %d, want the sliding window's 32", got)
	}
	if !slices.ContainsFunc(l.Warnings, func(s string) bool { return strings.Contains(s, "sliding window of 32") }) {
		t.Errorf("warnings %q say nothing of the sliding window", l.Warnings)
	}
	prompts := randomPrompts(rand.New(rand.NewPCG(1, 2)), c.Vocab, 20)
	const steps = 11 // to position 31, the window's last
	wantLogits, wantGen, err := reference.Greedy(c, w, prompts, steps, 1, 2)
	must(t, err)
	open := func() *Model {
		s, err := dev.NewStream()
		must(t, err)
		defer s.Close()
		m, err := NewFrom(dev, s, l.Weights, Options{Logits: true, PrefillLengths: []int{16, 32}, PrefillBatchSizes: []int{1},
			DecodeBatchSizes: []int{1, 2}, StopTokens: l.StopTokens})
		must(t, err)
		if m.Info().MaxSeq != 32 {
			t.Fatalf("the model serves %d positions", m.Info().MaxSeq)
		}
		return m
	}
	checkAgainstReference(t, dev, open, prompts, wantLogits, wantGen, steps)
}

// Llama 3 scaling keeps short wavelengths, divides long ones and blends
// between, on the float32 base frequencies, within float32 rounding of the
// reference's float64 ones; GGUF's per-pair factors divide; without
// scaling the table is accel.RoPEFreqs' (OpRoPE's bits); other types and
// incomplete llama3 parameters are refused.
func TestRoPEFrequencies(t *testing.T) {
	plain := Config{HeadDim: 64, RopeTheta: 10000}
	if f, err := ropeFrequencies(plain); err != nil || !slices.Equal(f, accel.RoPEFreqs(64, 10000)) {
		t.Fatalf("the unscaled table is not RoPEFreqs': %v", err)
	}
	c := Config{HeadDim: 128, RopeTheta: 500000, RopeScaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}}
	got, err := ropeFrequencies(c)
	must(t, err)
	base := accel.RoPEFreqs(128, 500000)
	want := reference.InvFreq(128, 500000, &reference.Llama3Scaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192})
	for i := range got {
		if d := float64(got[i])/want[i] - 1; d > 1e-6 || d < -1e-6 {
			t.Errorf("pair %d: %g, reference %g (base %g)", i, got[i], want[i], base[i])
		}
	}
	if got[0] != base[0] || got[63] != base[63]/8 {
		t.Errorf("first pair %g (base %g), last %g (base %g / 8)", got[0], base[0], got[63], base[63])
	}
	factors := make([]float32, len(base))
	for i := range factors {
		factors[i] = base[i] / got[i]
	}
	gg := Config{HeadDim: 128, RopeTheta: 500000, RopeScaling: &RopeScaling{Type: "llama3", FreqFactors: factors}}
	f, err := ropeFrequencies(gg)
	must(t, err)
	if d := reference.RelErr(f, got); d > 1e-6 {
		t.Errorf("dividing by GGUF-style factors: %.3g off the scaled table", d)
	}
	for _, s := range []*RopeScaling{{Type: "yarn", Factor: 4}, {Type: "llama3", Factor: 8}} {
		if _, err := ropeFrequencies(Config{HeadDim: 8, RopeTheta: 1e4, RopeScaling: s}); err == nil {
			t.Errorf("%+v accepted", *s)
		}
	}
}
