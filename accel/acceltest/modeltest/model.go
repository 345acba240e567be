// Package modeltest is the model half of the accel conformance suite: the
// embedded stories260K's greedy output on a backend, through the engine,
// eager and replayed, equals the llama2.c reference program's, token for
// token. It is apart from acceltest so that the kernel and graph suite
// compiles no engine and no model: each backend's TestConformance runs both.
package modeltest

import (
	"context"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/model/stories260k"
)

// Run checks that stories260K's greedy output on the backend, eager and
// replayed, equals the llama2.c reference program's
// (model/stories260k/testdata), token for token. A backend that is not
// present here skips.
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
