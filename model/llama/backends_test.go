package llama_test

import (
	"context"
	"os"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	_ "github.com/reprise-ml/reprise/accel/opencl"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// The model half of the backend conformance suite: on every registered
// backend that is present, stories260K's greedy output equals the reference
// program's, token for token, eager and replayed.
func TestGreedyReferenceOnEveryBackend(t *testing.T) {
	want, err := os.ReadFile("../stories260k/testdata/Once_upon_a_time.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range accel.Backends() {
		t.Run(name, func(t *testing.T) {
			if err := accel.Probe(name); err != nil {
				t.Skipf("%s not usable here: %v", name, err)
			}
			dev, err := accel.Open(name, 0, accel.Options{MemoryLimit: 1 << 30})
			if err != nil {
				t.Skipf("%s: %v", name, err)
			}
			defer dev.Close()
			for _, graphs := range []bool{false, true} {
				if graphs && !dev.Capability().GraphCapture {
					continue
				}
				got := generate(t, dev, graphs, "Once upon a time", 256)
				if got != string(want) {
					t.Errorf("graphs=%v:\ngot  %q\nwant %q", graphs, got, want)
				}
			}
		})
	}
}

func generate(t *testing.T, dev accel.Device, graphs bool, prompt string, steps int) string {
	t.Helper()
	m, tok, err := llama.Open(dev, llama.Source{}, llama.Options{PrefillBatchSizes: []int{1}, DecodeBatchSizes: []int{1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := engine.New(dev, m, engine.Options{Graphs: graphs, MaxBatch: 2})
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
	var out []byte
	for i := 1; i < len(ids); i++ {
		out = append(out, tok.SafePiece(ids[i-1], ids[i])...)
	}
	prev := ids[len(ids)-1]
	for _, g := range gen {
		out = append(out, tok.SafePiece(prev, int(g))...)
		prev = int(g)
	}
	return string(out) + "\n"
}
