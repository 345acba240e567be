package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// tightModel is the model options of tightEngine.
var tightModel = llama.Options{DecodeBatchSizes: []int{1, 8, 16}, PrefillLengths: []int{64, 256}, PrefillBatchSizes: []int{1, 4}}

// newTight opens stories260K on a CPU device of capacity bytes and an
// engine over it, as tightEngine does, but returns New's error.
func newTight(t *testing.T, capacity int64, eo engine.Options) (*engine.Engine, accel.Device, error) {
	t.Helper()
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	m, _, err := llama.Open(dev, llama.Source{}, tightModel)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	eo.MaxBatch, eo.MaxPrefillRows, eo.MaxPrefillTokens, eo.PlanCache = 16, 4, 256, "off"
	e, err := engine.New(dev, m, eo)
	if err == nil {
		t.Cleanup(e.Close)
	}
	return e, dev, err
}

// tightEngine builds an engine of stories260K on a CPU device of capacity
// bytes; it is not started.
func tightEngine(t *testing.T, capacity int64, eo engine.Options, logs *logCounter) *engine.Engine {
	t.Helper()
	eo.MaxBatch, eo.MaxPrefillRows, eo.MaxPrefillTokens = 16, 4, 256
	return tightEngineOf(t, capacity, eo, tightModel, logs)
}

func tightEngineOf(t *testing.T, capacity int64, eo engine.Options, mo llama.Options, logs *logCounter) *engine.Engine {
	t.Helper()
	eo.PlanCache = "off"
	if logs != nil {
		eo.Logger = slog.New(logs)
	}
	e, _, _ := openEngine(t, capacity, mo, eo)
	return e
}

// largestSteps submits n requests of 64-token prompts at once: prefills of
// as many prompts as a step takes, then a decode of up to n rows.
func largestSteps(t *testing.T, e *engine.Engine, n int) (failed int, last error) {
	t.Helper()
	prompt := make([]int32, 64)
	for i := range prompt {
		prompt[i] = int32(1 + i%500)
	}
	var hs []*engine.Handle
	for range n {
		h, err := e.Submit(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 8})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	for _, h := range hs {
		if _, err := drain(h); err != nil {
			failed++
			last = err
		}
	}
	return failed, last
}

// An automatically sized KV cache leaves the largest step room (made
// smaller at Start where it would not), so that every request runs. The
// cache is sized by where the allocator will place its tensors
// (kvPagesWithin): sized by bytes alone it asked for more than the device
// could place, and New failed.
func TestAutoKVLeavesTheLargestStepRoom(t *testing.T) {
	e := tightEngine(t, 12<<20, engine.Options{KVMemoryFraction: 0.999}, nil)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, err := largestSteps(t, e, 16); n > 0 {
		t.Fatalf("%d of 16 requests failed: %v", n, err)
	}
}

// A KV cache of a given size that leaves the largest step no room is refused
// at Start, saying how much memory is needed, instead of a server that
// fails every request. The cache asked for is the largest the device can
// allocate beside the model.
func TestKVPagesThatLeaveNoRoomAreRefused(t *testing.T) {
	// The device holds the model, a two-page cache and the largest step, and
	// no more; the cache given is the largest New can place in it.
	probe, dev, err := newTight(t, 64<<20, engine.Options{KVPages: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	capacity := dev.Allocator().Stats().PeakReserved
	probe.Close()
	lo, hi := 2, 4096 // New succeeds with lo pages and fails with hi
	if _, _, err := newTight(t, capacity, engine.Options{KVPages: hi}); err == nil {
		t.Fatalf("%d KV pages fitted in %d bytes", hi, capacity)
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if e, _, err := newTight(t, capacity, engine.Options{KVPages: mid}); err == nil {
			e.Close()
			lo = mid
		} else {
			hi = mid
		}
	}
	e, _, err := newTight(t, capacity, engine.Options{KVPages: lo})
	if err != nil {
		t.Fatal(err)
	}
	err = e.Start(context.Background())
	if !errors.Is(err, engine.ErrTooLittleMemory) || !strings.Contains(err.Error(), "are needed") {
		t.Fatalf("Start with %d KV pages in %d bytes: %v, want ErrTooLittleMemory saying what is needed", lo, capacity, err)
	}
}

// Background warm-ups leave the largest step its memory: requests served
// while (and after) the background phase runs on a tight device all pass.
// It takes the default buckets (smaller sets did not reproduce the failure:
// warm-ups holding outputs of buckets the plan left out, a plan whose floor
// came only from the buckets that warmed), about 10 s, so it runs with
// REPRISE_EXHAUSTIVE=1.
func TestBackgroundWarmUpsLeaveTheFloor(t *testing.T) {
	if os.Getenv("REPRISE_EXHAUSTIVE") != "1" {
		t.Skip("REPRISE_EXHAUSTIVE=1 runs it")
	}
	logs := &logCounter{}
	e := tightEngineOf(t, 24<<20, engine.Options{Graphs: true, BackgroundCapture: true}, llama.Options{}, logs)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	deadline := time.Now().Add(2 * time.Minute)
	for logs.count("background capture planned") == 0 && logs.count("capture finished") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("background warm-ups did not end")
		}
		once.Do(func() {
			if n, err := largestSteps(t, e, 64); n > 0 {
				t.Errorf("during warm-ups %d of 64 requests failed: %v", n, err)
			}
		})
		time.Sleep(5 * time.Millisecond)
	}
	if n, err := largestSteps(t, e, 64); n > 0 {
		logs.mu.Lock()
		for m, c := range logs.msgs {
			t.Logf("%d× %s", c, m)
		}
		for i, e := range logs.errors {
			if i < 3 || i > len(logs.errors)-4 {
				t.Log(e[:min(len(e), 500)])
			}
		}
		logs.mu.Unlock()
		if rep := e.Plan(); rep != nil {
			t.Logf("plan: floor %d free %d total %d count %d", rep.Plan.Floor, rep.Plan.Free, rep.Plan.Total(), rep.Plan.Count())
		}
		t.Fatalf("after warm-ups %d of 64 requests failed: %v", n, err)
	}
}
