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

// GraphStats reports every runner's telemetry, its live buckets and the
// time capture took; with graphs off, nothing but Enabled false.
func TestGraphStats(t *testing.T) {
	s := start(t, true, engine.Options{}, testModel)
	if _, _, err := s.e.Generate(context.Background(), engine.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 4}); err != nil {
		t.Fatal(err)
	}
	gs := s.e.GraphStats()
	if !gs.Enabled || gs.LiveBuckets == 0 || gs.LiveBuckets != s.e.LiveBuckets() || gs.CaptureTime <= 0 {
		t.Fatalf("graph stats %+v", gs)
	}
	replays := map[string]int64{}
	live := 0
	for _, r := range gs.Runners {
		live += r.LiveBuckets
		for _, b := range r.Buckets {
			replays[r.Name] += b.Replays
		}
	}
	if live != gs.LiveBuckets || replays["graphs"] == 0 || replays["blocks"] == 0 {
		t.Errorf("runners %v: live %d of %d, replays %v", gs.Runners, live, gs.LiveBuckets, replays)
	}
	off := start(t, false, engine.Options{}, testModel).e.GraphStats()
	if off.Enabled || len(off.Runners) != 0 || off.LiveBuckets != 0 {
		t.Errorf("graphs off: %+v", off)
	}
}
