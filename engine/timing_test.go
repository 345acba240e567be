package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/engine"
)

// A handle says when the scheduler admitted its request: between Submit
// and the first token.
func TestHandleAdmitted(t *testing.T) {
	s := start(t, false, engine.Options{}, testModel)
	before := time.Now()
	h, err := s.e.Submit(context.Background(), engine.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	o := <-h.Outputs()
	got := time.Now()
	if o.Done {
		t.Fatalf("first output is the end: %+v", o)
	}
	a := h.Admitted()
	if a.IsZero() || a.Before(before) || a.After(got) {
		t.Errorf("admitted at %v, want between submit %v and the first token %v", a, before, got)
	}
	for range h.Outputs() {
	}
}
