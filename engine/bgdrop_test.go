package engine_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// A bucket background capture keeps being refused for memory (a request
// holds every KV page) is dropped, never silently: an ERROR line names it and
// why, and the engine's stats count it (issue 19, item 4).
func TestBackgroundDropIsLoud(t *testing.T) {
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	m, _, err := llama.Open(dev, llama.Source{}, llama.Options{DecodeBatchSizes: []int{1, 2}, PrefillLengths: []int{16}, PrefillBatchSizes: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	logs := &logCounter{}
	e, err := engine.New(dev, m, engine.Options{Graphs: true, BackgroundCapture: true, KVPages: 6, MaxBatch: 2, PlanCache: "off",
		Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	// Drive the background by hand, as the loop would between steps.
	ctx := context.Background()
	if err := e.StartGraphsOnly(ctx); err != nil {
		t.Fatal(err)
	}
	capturing, pending, over := false, 0, false
	for !capturing && !over {
		capturing, pending, over = e.BackgroundUnit(ctx)
	}
	if over || pending == 0 {
		t.Fatal("background capture ended before capturing")
	}
	// A request is promised every page: no capture's padding rows fit.
	release, err := e.HoldPages(1<<40, 5*16)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	tries := 10 * engine.MaxCaptureTries * pending
	for i := 0; !over && i < tries; i++ {
		_, _, over = e.BackgroundUnit(ctx)
	}
	if !over {
		t.Fatalf("background capture still pending after %d tries", tries)
	}
	if got := e.Stats().BackgroundDropped; got != int64(pending) {
		t.Errorf("%d buckets counted dropped, want %d", got, pending)
	}
	logs.mu.Lock()
	errs := slices.Clone(logs.errors)
	logs.mu.Unlock()
	if len(errs) != pending {
		t.Errorf("%d ERROR lines for %d dropped buckets: %q", len(errs), pending, errs)
	}
	for _, e := range errs {
		if !strings.HasPrefix(e, "accelerator graph bucket dropped; it will run eager bucket=") || !strings.Contains(e, "refused") {
			t.Errorf("a drop that does not name its bucket and why: %q", e)
		}
	}
}
