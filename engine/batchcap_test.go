package engine_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// The decode batch cap is read after the graphs are captured, and after each
// background capture: a decode bucket that will not replay (here the 4-row
// one, whose capture-time padding rows need four KV pages of the three
// there are) lowers it to the largest that will, so batches replay that
// bucket instead of running eager at four rows (issue 19, item 8). It used
// to be read before capture: 4.
func TestBatchCapReadAfterCapture(t *testing.T) {
	open := func(t *testing.T, eo engine.Options) *engine.Engine {
		eo.Graphs, eo.KVPages, eo.MaxBatch, eo.PlanCache, eo.Logger = true, 4, 8, "off", slog.New(&logCounter{})
		e, _, _ := openEngine(t, 1<<30, llama.Options{DecodeBatchSizes: []int{1, 2, 4}, PrefillLengths: []int{16}, PrefillBatchSizes: []int{1}}, eo)
		return e
	}
	t.Run("foreground", func(t *testing.T) {
		e := open(t, engine.Options{})
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		var got int
		if err := e.OnLoop(context.Background(), func() { got = e.BatchCap() }); err != nil {
			t.Fatal(err)
		}
		if got != 2 {
			t.Fatalf("batch cap %d after capture, want 2 (the 4-row bucket was dropped)", got)
		}
	})
	t.Run("background", func(t *testing.T) {
		e := open(t, engine.Options{BackgroundCapture: true})
		ctx := context.Background()
		if err := e.StartGraphsOnly(ctx); err != nil {
			t.Fatal(err)
		}
		if got := e.BatchCap(); got != 4 {
			t.Fatalf("batch cap %d before anything is captured, want the configs' 4", got)
		}
		capturing, over := false, false
		for !capturing && !over {
			capturing, _, over = e.BackgroundUnit(ctx)
		}
		if got := e.BatchCap(); got != 2 {
			t.Fatalf("batch cap %d once planned, want 2 (the 4-row bucket will not replay)", got)
		}
		for !over {
			_, _, over = e.BackgroundUnit(ctx)
		}
		if got := e.BatchCap(); got != 2 {
			t.Fatalf("batch cap %d after background capture, want 2", got)
		}
	})
}
