package llama

import (
	"context"
	"math"
	"os"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/stories260k"
)

const fixtures = "../gguf/testdata/"

// generateText runs a greedy generation of steps positions the way the
// reference program prints it.
func generateText(t *testing.T, dev accel.Device, src Source, graphs bool, prompt string, steps int) string {
	t.Helper()
	m, l, err := OpenLoaded(dev, src, Options{PrefillBatchSizes: []int{1}, PrefillLengths: []int{16}, DecodeBatchSizes: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Text
	defer m.Close()
	e, err := engine.New(dev, m, engine.Options{Graphs: graphs, MaxBatch: 1, PlanCache: "off"})
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

func cpuDevice(t *testing.T) accel.Device {
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// TestGGUFStories260K: llama.cpp's conversion of stories260K generates the
// reference text, eager and replayed, with its own vocabulary.
func TestGGUFStories260K(t *testing.T) {
	dev := cpuDevice(t)
	// "The little dog" ends its story with BOS, which must stop it.
	for _, c := range []struct {
		prompt string
		graphs bool
	}{{"Once upon a time", true}, {"The little dog", false}} {
		want, ok := stories260k.Reference(c.prompt)
		if !ok {
			t.Fatal("no reference")
		}
		got := generateText(t, dev, Source{Model: fixtures + "stories260K.gguf", MaxSeq: 512}, c.graphs, c.prompt, stories260k.ReferenceSteps)
		if got != want {
			t.Errorf("%q graphs=%v:\ngot  %q\nwant %q", c.prompt, c.graphs, got, want)
		}
	}
	// Eager and replayed agree on the first: TestGenerateGGUF (cmd/reprise)
	// runs it eager.
	if _, err := os.Stat(fixtures + "stories260K.gguf"); err != nil {
		t.Fatal(err)
	}
}

// prefillLogits returns the last position's logits of one eager prefill.
func prefillLogits(t *testing.T, dev accel.Device, src Source, prompt []int32) []float32 {
	t.Helper()
	m, _, err := Open(dev, src, Options{Logits: true, Prefill: PrefillEager, DecodeBatchSizes: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := engine.New(dev, m, engine.Options{Graphs: false, MaxBatch: 1, PlanCache: "off"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := e.Prefill(context.Background(), [][]int32{prompt}, true)
	if err != nil || len(res.Logits) != 1 {
		t.Fatalf("prefill: %v, %d rows", err, len(res.Logits))
	}
	return res.Logits[0]
}

// TestR128Logits: the llama2.c checkpoint and llama.cpp's conversion of it
// give bit-identical logits.
func TestR128Logits(t *testing.T) {
	dev := cpuDevice(t)
	prompt := []int32{1, 403, 407, 261, 378, 100, 7, 300, 511}
	a := prefillLogits(t, dev, Source{Model: fixtures + "r128.llama2c.bin", Tokenizer: "../stories260k/tok512.bin"}, prompt)
	b := prefillLogits(t, dev, Source{Model: fixtures + "r128.gguf"}, prompt)
	if len(a) != 512 || len(b) != 512 {
		t.Fatalf("%d and %d logits", len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("logit %d: llama2.c %v, gguf %v", i, a[i], b[i])
		}
	}
}
