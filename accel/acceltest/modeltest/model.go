// Package modeltest is the model half of the accel conformance suite: the
// embedded stories260K's greedy output on a backend, through the engine,
// eager and replayed, equals the llama2.c reference program's, token for
// token; and synthetic Qwen2 and Qwen3 Hugging Face directories agree with
// the float64 architecture reference (model/llama/reference). It is apart from acceltest so that the kernel and graph suite
// compiles no engine and no model: each backend's TestConformance runs both.
package modeltest

import (
	"context"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/model/llama/reference"
	"github.com/reprise-ml/reprise/model/stories260k"
)

// Run checks that stories260K's greedy output on the backend, eager and
// replayed, equals the llama2.c reference program's
// (model/stories260k/testdata), token for token, then the architectures
// (subtest Architectures). A backend that is not present here skips.
func Run(t *testing.T, backend string) {
	if err := accel.Probe(backend); err != nil {
		t.Skipf("backend %s not usable here: %v", backend, err)
	}
	want, ok := stories260k.Reference("Once upon a time")
	if !ok {
		t.Fatal("no reference output")
	}
	e := acceltest.Open(t, backend, accel.Options{MemoryLimit: 1 << 30})
	for _, graphs := range []bool{false, true} {
		if graphs && !e.Dev.Capability().GraphCapture {
			continue
		}
		if got := generate(t, e.Dev, graphs, "Once upon a time", stories260k.ReferenceSteps); got != want {
			t.Errorf("graphs=%v:\ngot  %q\nwant %q", graphs, got, want)
		}
	}
	t.Run("Architectures", func(t *testing.T) { testArchModel(t, backend) })
}

func generate(t *testing.T, dev accel.Device, graphs bool, prompt string, steps int) string {
	t.Helper()
	m, tok, err := llama.Open(dev, llama.Source{}, llama.Options{PrefillBatchSizes: []int{1}, PrefillLengths: []int{16}, DecodeBatchSizes: []int{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := engine.New(dev, m, engine.Options{Graphs: graphs, MaxBatch: 2, PlanCache: "off"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(prompt, true, false)
	p := make([]int32, len(ids))
	for i, x := range ids {
		p[i] = int32(x)
	}
	gen, _, err := e.Generate(context.Background(), engine.Request{Prompt: p, MaxTokens: steps - len(ids) + 1})
	if err != nil {
		t.Fatal(err)
	}
	return stories260k.Printed(tok.SafePiece, ids, gen)
}

// testArchModel is the architecture half of the model suite: synthetic
// Hugging Face directories of the maths no fixture exercises (Qwen2's q/k/v
// biases with tied embeddings and Llama 3 rope scaling; Qwen3's per-head
// q/k norms with heads of 16 over a width of 32), loaded onto the backend
// and served eager and replayed, agree with the float64 reference forward:
// each prompt's last logits within 1e-4 of the largest, greedy
// continuations token for token.
func testArchModel(t *testing.T, backend string) {
	e := acceltest.Open(t, backend, accel.Options{MemoryLimit: 1 << 30})
	base := reference.Config{Dim: 32, Hidden: 48, Layers: 2, Heads: 4, KVHeads: 2, Vocab: 40, SeqLen: 64, Eps: 1e-6, Theta: 1e6, Halves: true}
	qwen2 := base
	qwen2.QKVBias, qwen2.Tied = true, true
	qwen2.Scaling = &reference.Llama3Scaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 32}
	qwen3 := base
	qwen3.QKNorm, qwen3.HeadDim = true, 16
	for i, c := range []struct {
		arch string
		c    reference.Config
	}{{"Qwen2ForCausalLM", qwen2}, {"Qwen3ForCausalLM", qwen3}} {
		t.Run(c.arch, func(t *testing.T) {
			w := reference.Random(c.c, uint64(40+i))
			dir := t.TempDir()
			if err := reference.WriteHF(dir, c.arch, c.c, w, nil); err != nil {
				t.Fatal(err)
			}
			prompts := [][]int32{{5, 9, 33, 7, 12}, {21}, {3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}}
			const steps = 10
			wantLogits, wantGen, err := reference.Greedy(c.c, w, prompts, steps, 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, graphs := range []bool{false, true} {
				if graphs && !e.Dev.Capability().GraphCapture {
					continue
				}
				ws, err := llama.OpenHF(dir)
				if err != nil {
					t.Fatal(err)
				}
				m, err := llama.NewFrom(e.Dev, e.S, ws, llama.Options{Logits: true, PrefillLengths: []int{16, 32}, PrefillBatchSizes: []int{1, 4},
					DecodeBatchSizes: []int{1, 2}, StopTokens: ws.StopTokens()})
				ws.Close()
				if err != nil {
					t.Fatal(err)
				}
				eng, err := engine.New(e.Dev, m, engine.Options{Graphs: graphs, MaxBatch: 2, PlanCache: "off"})
				if err != nil {
					t.Fatal(err)
				}
				if err := eng.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				res, err := eng.Prefill(context.Background(), prompts, !graphs)
				if err != nil {
					t.Fatal(err)
				}
				if graphs && !res.Replayed {
					t.Error("the prefill did not replay")
				}
				for j := range prompts {
					if d := reference.RelErr(res.Logits[j], wantLogits[j]); d > 1e-4 {
						t.Errorf("graphs=%v prompt %d: logits differ from the reference by %.3g of the largest", graphs, j, d)
					}
				}
				for j, p := range prompts {
					gen, _, err := eng.Generate(context.Background(), engine.Request{Prompt: p, MaxTokens: steps})
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(gen, wantGen[j]) {
						t.Errorf("graphs=%v prompt %d: greedy %v, reference %v", graphs, j, gen, wantGen[j])
					}
				}
				eng.Close()
				m.Close()
			}
		})
	}
}
