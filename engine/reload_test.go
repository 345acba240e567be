package engine_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// reloadModel is stories260K with its embedding (and so its shared
// classifier) scaled: other weights of the same shapes.
func reloadModel(t testing.TB, dev accel.Device, scale float32, opts llama.Options) *llama.Model {
	t.Helper()
	ck, _, err := llama.Default()
	if err != nil {
		t.Fatal(err)
	}
	if scale != 1 {
		c := *ck
		c.TokenEmbedding = slices.Clone(ck.TokenEmbedding)
		for i := range c.TokenEmbedding {
			c.TokenEmbedding[i] *= scale
		}
		if ck.Config.SharedClassifier {
			c.Classifier = c.TokenEmbedding
		}
		ck = &c
	}
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	m, err := llama.New(dev, s, ck, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Reload swaps in new weights of the same shapes and updates every captured
// graph in place: the engine then gives what a fresh engine on the new
// weights gives, its replays equal eager, and a model of other shapes is
// refused.
func TestReloadUpdatesGraphsInPlace(t *testing.T) {
	_, tok, err := llama.Default()
	if err != nil {
		t.Fatal(err)
	}
	opts := llama.Options{Logits: true, PrefillLengths: []int{16, 32}, PrefillBatchSizes: []int{1, 4}, DecodeBatchSizes: []int{1, 2, 4}}
	js := jobs(tok, 6)
	run := func(scale float32, graphs bool) [][]int32 {
		dev := openCPU(t)
		m := reloadModel(t, dev, scale, opts)
		defer m.Close()
		e, err := engine.New(dev, m, engine.Options{Graphs: graphs, PlanCache: "off"})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return runAll(t, e, js)
	}
	wantNew := run(1.25, true)
	if eager := run(1.25, false); !slices.EqualFunc(eager, wantNew, slices.Equal) {
		t.Fatal("a fresh engine's replays differ from eager on the new weights")
	}

	dev := openCPU(t)
	old := reloadModel(t, dev, 1, opts)
	e, err := engine.New(dev, old, engine.Options{Graphs: true, PlanCache: "off"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := runAll(t, e, js)
	if slices.EqualFunc(before, wantNew, slices.Equal) {
		t.Fatal("the new weights give the old weights' tokens: the test cannot tell them apart")
	}
	// Other shapes are refused, and nothing changes.
	other := reloadModel(t, dev, 1, llama.Options{Logits: true, PrefillLengths: []int{16}, PrefillBatchSizes: []int{1}, DecodeBatchSizes: []int{1}})
	if _, err := e.Reload(context.Background(), other); !errors.Is(err, engine.ErrShapeMismatch) {
		t.Fatalf("a model of other graph shapes: %v, want ErrShapeMismatch", err)
	}
	other.Close()

	m := reloadModel(t, dev, 1.25, opts)
	defer m.Close()
	res, err := e.Reload(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	old.Close()
	if res.InPlace == 0 || res.Recaptured != 0 {
		t.Fatalf("reload %+v: want every slot updated in place", res)
	}
	replayed := func() int64 {
		var n int64
		for _, r := range e.Runners() {
			for _, b := range r.Telemetry().Buckets {
				n += b.Replays
			}
		}
		return n
	}
	replays := replayed()
	if got := runAll(t, e, js); !slices.EqualFunc(got, wantNew, slices.Equal) {
		t.Fatal("after reload the engine does not give the new weights' tokens")
	}
	if replayed() == replays {
		t.Fatal("nothing replayed after the reload")
	}
	// Prefill replays (the captured block loop) equal eager on the new
	// weights.
	ps := [][]int32{tokens(tok, "Once upon a time"), tokens(tok, "The little dog ran")}
	eager, err := e.Prefill(context.Background(), ps, true)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := e.Prefill(context.Background(), ps, false)
	if err != nil {
		t.Fatal(err)
	}
	if !pw.Replayed {
		t.Fatal("the prefill did not replay")
	}
	for i := range ps {
		if !slices.Equal(accel.F32Bytes(pw.Logits[i]), accel.F32Bytes(eager.Logits[i])) {
			t.Fatalf("prompt %d: replayed prefill logits after reload differ from eager", i)
		}
	}
	// Reloads may be called concurrently: each runs (its shape check
	// included) on the loop in turn, and both succeed.
	var wg sync.WaitGroup
	for _, scale := range []float32{1, 1.25} {
		m := reloadModel(t, dev, scale, opts)
		defer m.Close()
		wg.Go(func() {
			if _, err := e.Reload(context.Background(), m); err != nil {
				t.Errorf("a concurrent reload: %v", err)
			}
		})
	}
	wg.Wait()
}
