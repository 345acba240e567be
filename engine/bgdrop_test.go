package engine_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// bgEngine is an engine with background capture on a small KV cache (five
// pages besides the sink) and three buckets, its graphs prepared but its
// loop not started: the test drives background capture by hand, as the loop
// would between steps.
func bgEngine(t *testing.T, eo engine.Options, logs *logCounter) *engine.Engine {
	t.Helper()
	eo.BackgroundCapture = true
	e := bgEngineUnstarted(t, eo, logs)
	if err := e.StartGraphsOnly(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e
}

// bgEngineUnstarted is that engine, with the background as eo says, not
// started.
func bgEngineUnstarted(t *testing.T, eo engine.Options, logs *logCounter) *engine.Engine {
	t.Helper()
	eo.Graphs, eo.KVPages, eo.MaxBatch, eo.PlanCache = true, 6, 2, "off"
	eo.Logger = slog.New(logs)
	e, _, _ := openEngine(t, 1<<30, llama.Options{DecodeBatchSizes: []int{1, 2}, PrefillLengths: []int{16}, PrefillBatchSizes: []int{1}}, eo)
	return e
}

// untilCapturing runs background units until buckets are being captured and
// returns how many wait.
func untilCapturing(t *testing.T, e *engine.Engine) int {
	t.Helper()
	capturing, pending, over := false, 0, false
	for !capturing && !over {
		capturing, pending, over = e.BackgroundUnit(context.Background())
	}
	if over || pending == 0 {
		t.Fatal("background capture ended before capturing")
	}
	return pending
}

// A bucket background capture is refused for memory (a request holds every
// KV page) is not dropped while memory can still free: it backs off,
// doubling its wait up to MaxBackoff units, and is tried again as soon as
// the request releases what it held, and captured (issue 19, item 4). The
// engine used to drop it after 50 refusals in a row, a few milliseconds of
// a busy engine.
func TestBackgroundRefusalsBackOff(t *testing.T) {
	logs := &logCounter{}
	e := bgEngine(t, engine.Options{}, logs)
	ctx := context.Background()
	pending := untilCapturing(t, e)
	release, err := e.HoldPages(1<<40, 5*16)
	if err != nil {
		t.Fatal(err)
	}
	const units = 400
	for i := 0; i < units; i++ {
		if _, _, over := e.BackgroundUnit(ctx); over {
			t.Fatal("background capture ended while memory could still free")
		}
	}
	if got := e.Stats().BackgroundDropped; got != 0 {
		t.Fatalf("%d buckets dropped while memory could still free", got)
	}
	// Doubling waits: 1+2+...+64 is 127 units for 7 tries, then one try
	// every 64 units; a little more per bucket, since each backs off on
	// its own.
	if tries, most := e.CaptureTries(), pending*(7+(units-127)/engine.MaxBackoff+1); tries == 0 || tries > most {
		t.Fatalf("%d tries in %d units for %d buckets, want 1 to %d (back-off)", tries, units, pending, most)
	}
	release()
	// Memory was released: every bucket is tried at once, not after its
	// back-off, and captured.
	over := false
	for i := 0; !over && i <= pending; i++ {
		_, _, over = e.BackgroundUnit(ctx)
	}
	if !over {
		t.Fatalf("background capture not over %d units after memory was released", pending+1)
	}
	if got, dropped := e.LiveBuckets(), e.Stats().BackgroundDropped; got != pending || dropped != 0 {
		t.Fatalf("%d buckets live, %d dropped; want all %d live", got, dropped, pending)
	}
	logs.mu.Lock()
	errs := slices.Clone(logs.errors)
	logs.mu.Unlock()
	if len(errs) != 0 {
		t.Fatalf("ERROR lines: %q", errs)
	}
}

// A warm-up refused for memory backs off too, rather than being tried (and
// logged) at every unit: a few tries in hundreds of units while a request
// holds every page, then, once it releases them, the warm-ups, the plan
// and the captures go through (issue 19, item 4).
func TestBackgroundWarmUpRefusalsBackOff(t *testing.T) {
	logs := &logCounter{}
	e := bgEngine(t, engine.Options{}, logs)
	ctx := context.Background()
	release, err := e.HoldPages(1<<40, 5*16)
	if err != nil {
		t.Fatal(err)
	}
	const units = 400
	for i := 0; i < units; i++ {
		if capturing, _, over := e.BackgroundUnit(ctx); capturing || over {
			t.Fatal("warm-ups passed while a request held every page")
		}
	}
	const deferred = "accelerator graph warm-up deferred: resources busy"
	if n, most := logs.count(deferred), 7+(units-127)/engine.MaxBackoff+1; n == 0 || n > most {
		t.Fatalf("%d deferred warm-ups in %d units, want 1 to %d (back-off)", n, units, most)
	}
	release()
	over := false
	for i := 0; !over && i < 100; i++ {
		_, _, over = e.BackgroundUnit(ctx)
	}
	if !over || e.LiveBuckets() != 3 || e.Stats().BackgroundDropped != 0 {
		t.Fatalf("after the pages were released: over %v, %d buckets live, %d dropped; want all 3 live", over, e.LiveBuckets(), e.Stats().BackgroundDropped)
	}
}
