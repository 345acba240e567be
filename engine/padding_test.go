package engine_test

import (
	"context"
	"testing"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
)

// Padding rows stay at rest between steps: position 0, no KV length and no
// pages (they address the sink page), sampler offset 0. A padded step's
// Release returns its tail padding rows to rest whatever state they were in,
// so a row some capture or resource left out of rest cannot carry that
// state into the steps after it. Today no replay step moves a padding row
// (they are at rest through it), so the test first moves the tail rows of
// the bucket a three-request decode replays on out of rest, as a capture
// that did not clean up would leave them, and checks that the padded steps
// bring them back.
func TestPaddingRowsRestAfterPaddedSteps(t *testing.T) {
	s := start(t, true, engine.Options{}, testModel)
	e, r := s.e, s.e.Runner()
	ctx := context.Background()
	const (
		real      = 3 // requests in every decode step
		bucket    = 4 // the decode bucket they replay in, one padding row
		maxTokens = 6 // a prefill, then five padded decode steps
	)
	reqs := []engine.Request{
		{Prompt: tokens(s.tok, "Once upon a time"), MaxTokens: maxTokens},
		{Prompt: tokens(s.tok, "The little dog"), MaxTokens: maxTokens},
		{Prompt: tokens(s.tok, "A big red ball"), MaxTokens: maxTokens},
	}
	// atRest reports the padding rows not at rest.
	atRest := func(when string) {
		t.Helper()
		var rows []engine.PaddingRow
		if err := e.OnLoop(ctx, func() { rows = e.PaddingRows() }); err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			t.Fatalf("%s: no padding rows in the resources", when)
		}
		for _, p := range rows {
			if p != (engine.PaddingRow{ID: p.ID}) {
				t.Errorf("%s: padding row %d (%s) is not at rest: positions at %d (%d committed), KV at %d with %d pages, sampler at %d (%d committed)",
					when, p.ID, graph.PaddingName(p.ID), p.PosNext, p.PosCommitted, p.KVNext, p.KVPages, p.SampNext, p.SampCommitted)
			}
		}
	}
	atRest("after capture")
	if t.Failed() {
		t.FailNow()
	}

	// Each slot's tail padding row of the bucket, moved out of rest; then
	// the requests, all in one prefill and the same decode steps.
	var tails []int64
	hs := make([]*engine.Handle, len(reqs))
	var setupErr error
	if err := e.OnLoop(ctx, func() {
		for slot := range r.NumSlots() {
			l := r.LeaseSlot(graph.LeaseRequest{Walk: engine.WalkDecode, Rows: real, AheadOfInputs: true, PinSlot: true, Slot: slot})
			if l == nil || l.Bucket.BatchSize != bucket {
				t.Errorf("%d decode rows lease %v on slot %d, want a bucket of %d", real, l, slot, bucket)
				return
			}
			rows, err := r.PadInputs(l, make([]graph.Row, real))
			if err != nil {
				setupErr = err
				return
			}
			tails = append(tails, rows[real].ID)
		}
		if setupErr = e.UnrestPadding(tails, 5); setupErr != nil {
			return
		}
		for i, req := range reqs {
			if hs[i], setupErr = e.Submit(ctx, req); setupErr != nil {
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if setupErr != nil || t.Failed() {
		t.Fatalf("setup: %v", setupErr)
	}
	if r.NumSlots() < 2 || len(tails) != r.NumSlots() {
		t.Fatalf("%d slots, tail padding rows %v: the test needs a double buffer", r.NumSlots(), tails)
	}

	for i, h := range hs {
		n, reason := 0, ""
		for o := range h.Outputs() {
			if o.Done {
				if o.Err != nil {
					t.Fatalf("request %d: %v", i, o.Err)
				}
				reason = o.Reason
				break
			}
			n++
		}
		if n != maxTokens || reason != "length" {
			t.Fatalf("request %d ended %q after %d tokens; the test needs every decode step to hold all %d requests", i, reason, n, real)
		}
	}
	replays := int64(0)
	for _, st := range e.Stats().Steps {
		if st.Walk == engine.WalkDecode && st.Replay {
			replays += st.Steps
		}
	}
	if replays != maxTokens-1 {
		t.Fatalf("%d decode steps replayed, want %d (each slot's tail row padded at least once)", replays, maxTokens-1)
	}
	atRest("after padded decode steps")
}
