package engine_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// An F16 KV cache keeps the engine's promises: a request's tokens do not
// depend on the batch it ran in or on whether its steps replayed, forks
// share and copy their prompt's pages, and an automatically sized cache
// holds twice the pages of an F32 one in the same memory.
func TestKVCacheF16(t *testing.T) {
	_, tok, err := llama.Default()
	if err != nil {
		t.Fatal(err)
	}
	f16 := engine.Options{KVCacheDType: accel.F16, PageSize: 4}
	js := jobs(tok, 16)
	alone := start(t, false, f16, testModel)
	for i := range js {
		js[i].want = runAll(t, alone.e, js[i:i+1])[0]
	}
	differs := false
	f32 := start(t, false, engine.Options{PageSize: 4}, testModel)
	for i, got := range runAll(t, f32.e, js) {
		differs = differs || !slices.Equal(got, js[i].want)
	}
	for _, graphs := range []bool{false, true} {
		s := start(t, graphs, f16, testModel)
		for i, got := range runAll(t, s.e, js) {
			if !slices.Equal(got, js[i].want) {
				t.Fatalf("graphs=%v request %d: batched %v, alone %v", graphs, i, got, js[i].want)
			}
		}
		// Four choices of one prompt fork its pages; each equals its own
		// request alone.
		req := engine.Request{Prompt: []int32{1, 403, 407, 261, 378, 300, 301}, MaxTokens: 12, Sampling: engine.Sampling{Temperature: 1}}
		seeds := []uint64{5, 6, 7, 8}
		hs, err := s.e.SubmitChoices(context.Background(), req, seeds)
		if err != nil {
			t.Fatal(err)
		}
		got := tokensOf(t, hs)
		for i, sd := range seeds {
			one := req
			one.Sampling.Seed = sd
			if want := outTokens(penaltyRun(t, alone.e, one)[0]); !slices.Equal(got[i], want) {
				t.Fatalf("graphs=%v choice %d: %v, alone %v", graphs, i, got[i], want)
			}
		}
		waitPagesFree(t, s.e, "after every request ended")
	}
	// The rounding is real: some request's tokens moved (sampled ones
	// follow the probabilities; a test that cannot tell the two caches
	// apart would not see a cache left in float32).
	if !differs {
		t.Errorf("every request's tokens are the same with f32 and f16 caches")
	}
	// In the same memory, twice the pages (the allocator's segments aside).
	pages := func(dt accel.DType) int {
		e, _, _ := openEngine(t, 32<<20, testModel, engine.Options{KVCacheDType: dt, KVMemoryFraction: 0.25})
		st := e.Stats()
		return st.KVPagesFree + st.KVPagesUsed
	}
	if p32, p16 := pages(accel.F32), pages(accel.F16); p16 < 19*p32/10 {
		t.Errorf("an automatically sized cache: %d f16 pages, %d f32 pages", p16, p32)
	}
	// Only F32 and F16.
	dev, err := accel.Open("cpu", 0, accel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m, _, err := llama.Open(dev, llama.Source{}, testModel)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := engine.New(dev, m, engine.Options{KVCacheDType: accel.BF16, PlanCache: "off"}); !errors.Is(err, accel.ErrInvalidArgument) {
		t.Errorf("a bf16 KV cache: %v, want ErrInvalidArgument", err)
	}
}
