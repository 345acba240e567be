package engine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/reprise-ml/reprise/engine"
)

// newEngine builds an engine that is not started: what Submit does before the
// loop has seen anything.
func newEngine(t *testing.T, eo engine.Options) *engine.Engine {
	t.Helper()
	e, _, _ := openEngine(t, 1<<30, testModel, eo)
	return e
}

// The queue holds MaxQueue requests, not half of them: a queued request is
// counted once.
func TestQueueHoldsMaxQueue(t *testing.T) {
	for _, max := range []int{1, 2, 4, 7} {
		e := newEngine(t, engine.Options{MaxQueue: max, MaxBatch: 2})
		req := engine.Request{Prompt: []int32{1, 2}, MaxTokens: 1}
		for i := range max {
			if _, err := e.Submit(context.Background(), req); err != nil {
				t.Fatalf("max queue %d: request %d refused: %v", max, i+1, err)
			}
		}
		if _, err := e.Submit(context.Background(), req); !errors.Is(err, engine.ErrQueueFull) {
			t.Fatalf("max queue %d: request %d: %v, want ErrQueueFull", max, max+1, err)
		}
		if got := e.Stats().Waiting; got != int64(max) {
			t.Fatalf("max queue %d: %d waiting", max, got)
		}
	}
}
