package engine_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// syncBuffer is a log sink safe from the runner's and the test's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

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
	logs := &syncBuffer{}
	e, err := engine.New(dev, m, engine.Options{Graphs: true, BackgroundCapture: true, KVPages: 6, MaxBatch: 2, PlanCache: "off",
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
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
	if n := strings.Count(logs.String(), "level=ERROR msg=\"accelerator graph bucket dropped; it will run eager\""); n != pending {
		t.Errorf("%d ERROR lines for %d dropped buckets:\n%s", n, pending, logs.String())
	}
	if !strings.Contains(logs.String(), `bucket="decode[bs=2,`) || !strings.Contains(logs.String(), "refused") {
		t.Errorf("the drops do not name the bucket and why:\n%s", logs.String())
	}
}
