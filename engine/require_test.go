package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
)

// requireModel's buckets: decode for 1 and 2 requests, and the piecewise
// prefill region's one bucket (1 prompt, 16 tokens).
var requireBuckets = []string{"decode[bs=2,tokens=2,key=]", "decode[bs=1,tokens=1,key=]", "[bs=1,tokens=16,key=]"}

// With graphs required, a plan that leaves every bucket out (a memory
// budget that holds none) fails Start with one error naming every declared
// bucket of every runner, and why (issue 19, item 3). Start used to succeed
// and serve eager: only a dropped capture was an error.
func TestRequireGraphsFailsStartForBucketsLeftOut(t *testing.T) {
	logs := &logCounter{}
	e := bgEngineUnstarted(t, engine.Options{MemoryFraction: 1e-6, Runner: graph.Options{RequireGraphs: true}}, logs)
	err := e.Start(context.Background())
	if !errors.Is(err, graph.ErrGraphsRequired) {
		t.Fatalf("Start: %v, want ErrGraphsRequired", err)
	}
	for _, b := range requireBuckets {
		if !strings.Contains(err.Error(), b+" (left out by the capture plan") {
			t.Errorf("the error does not name %s left out by the plan: %v", b, err)
		}
	}
	if !strings.Contains(err.Error(), "3 declared bucket(s) will not replay") {
		t.Errorf("one error for all three buckets: %v", err)
	}
}

// With graphs required and background capture, the engine serves (eager)
// but is not ready until every bucket is live; a plan that leaves buckets out
// stops it with an error naming them: Err wraps ErrGraphsRequired, Done
// closes, and what is submitted after is refused (issue 19, item 3).
func TestRequireGraphsInTheBackground(t *testing.T) {
	t.Run("all live", func(t *testing.T) {
		e := bgEngineUnstarted(t, engine.Options{BackgroundCapture: true, Runner: graph.Options{RequireGraphs: true}}, &logCounter{})
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if gs := e.GraphStats(); gs.Ready || gs.NotReady == "" {
			t.Fatalf("ready before any bucket is live: %+v", gs)
		}
		deadline := time.Now().Add(time.Minute)
		for !e.GraphStats().Ready {
			if time.Now().After(deadline) {
				t.Fatalf("not ready after a minute: %d buckets live, %v", e.LiveBuckets(), e.GraphStats().NotReady)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if got := e.LiveBuckets(); got != len(requireBuckets) {
			t.Fatalf("ready with %d buckets live, want %d", got, len(requireBuckets))
		}
		if err := e.Err(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("left out", func(t *testing.T) {
		e := bgEngineUnstarted(t, engine.Options{BackgroundCapture: true, MemoryFraction: 1e-6, Runner: graph.Options{RequireGraphs: true}}, &logCounter{})
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-e.Done():
		case <-time.After(time.Minute):
			t.Fatal("the engine still runs a minute after start with every bucket left out")
		}
		err := e.Err()
		if !errors.Is(err, graph.ErrGraphsRequired) {
			t.Fatalf("Err: %v, want ErrGraphsRequired", err)
		}
		for _, b := range requireBuckets {
			if !strings.Contains(err.Error(), b+" (left out by the capture plan") {
				t.Errorf("the error does not name %s left out by the plan: %v", b, err)
			}
		}
		if gs := e.GraphStats(); gs.Ready {
			t.Error("a stopped engine says it is ready")
		}
		if _, err := e.Submit(context.Background(), engine.Request{Prompt: []int32{1, 2}, MaxTokens: 1}); !errors.Is(err, engine.ErrClosed) {
			t.Fatalf("Submit after the engine stopped: %v, want ErrClosed", err)
		}
	})
}
