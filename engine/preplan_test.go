package engine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// A stale pre-plan is undone: decode step N+1, pre-planned while step N
// replays, is admitted for the requests running then; a new request's
// prefill or a cancellation makes it stale, and discarding it must give back
// everything it admitted (positions, pages, its lease's padding rows). If it
// did not, every request it held would run one position ahead from then on.
// Each surviving request gives the tokens it gives alone on an eager engine,
// and nothing is left in the KV cache at the end.
func TestStalePrePlanIsUndone(t *testing.T) {
	s := start(t, true, engine.Options{}, testModel)
	e := s.e
	// Greedy, and long enough that no request ends (or stops on its own)
	// before the last interference.
	first := []engine.Request{
		{Prompt: tokens(s.tok, "Once upon a time"), MaxTokens: 100},
		{Prompt: tokens(s.tok, "The little dog"), MaxTokens: 100},
		{Prompt: tokens(s.tok, "Lily and Ben went to the park"), MaxTokens: 100},
		{Prompt: tokens(s.tok, "A big red ball"), MaxTokens: 100},
	}
	later := []engine.Request{
		{Prompt: tokens(s.tok, "Tom was sad because"), MaxTokens: 30},
		{Prompt: tokens(s.tok, "She found a shiny stone"), MaxTokens: 30},
		{Prompt: tokens(s.tok, "One day, a bird"), MaxTokens: 30},
		{Prompt: tokens(s.tok, "The sun was hot and"), MaxTokens: 30},
	}
	const victim = 1 // which of the first requests is cancelled
	eager := start(t, false, engine.Options{}, testModel)
	want := make([][]int32, 0, len(first)+len(later))
	for i, req := range append(slices.Clone(first), later...) {
		got := runAll(t, eager.e, []job{{req: req}})[0]
		if len(got) != req.MaxTokens {
			t.Fatalf("request %d stops on its own after %d tokens; the test needs it to run its %d", i, len(got), req.MaxTokens)
		}
		want = append(want, got)
	}

	ctx := context.Background()
	submit := func(req engine.Request) *engine.Handle {
		h, err := e.Submit(ctx, req)
		if err != nil {
			t.Error(err)
			return nil
		}
		return h
	}
	next := func(i int, h *engine.Handle) int32 {
		t.Helper()
		o, ok := <-h.Outputs()
		if !ok || o.Done {
			t.Fatalf("request %d ended early: %+v", i, o)
		}
		return o.Token
	}
	// whenPrePlanned runs act on the loop, between steps, once a pre-plan
	// for exactly the running requests (ids, in order) is pending, so the
	// very next step finds it stale.
	whenPrePlanned := func(what string, ids []int64, act func()) {
		t.Helper()
		for try := 0; ; try++ {
			var pre []int64
			done := false
			if err := e.OnLoop(ctx, func() {
				pre = e.PrePlanned()
				if slices.Equal(pre, ids) {
					act()
					done = true
				}
			}); err != nil {
				t.Fatal(err)
			}
			if done {
				return
			}
			if try == 100 {
				t.Fatalf("%s: no pre-plan for requests %v after %d steps (last: %v)", what, ids, try, pre)
			}
		}
	}

	hs := make([]*engine.Handle, 0, len(first)+len(later))
	got := make([][]int32, len(first)+len(later))
	var ids []int64
	for _, req := range first {
		h := submit(req)
		if h == nil {
			t.FailNow()
		}
		hs = append(hs, h)
		ids = append(ids, h.ID())
	}
	for range 5 {
		for i := range first {
			got[i] = append(got[i], next(i, hs[i]))
		}
	}

	// A new request's prefill makes the pre-plan stale.
	var stale int64
	whenPrePlanned("before the new requests", ids, func() {
		stale = e.Stats().PrePlanStale
		for _, req := range later {
			hs = append(hs, submit(req))
		}
	})
	if len(hs) != len(first)+len(later) || slices.Contains(hs, nil) {
		t.FailNow()
	}
	for i := len(first); i < len(hs); i++ {
		got[i] = append(got[i], next(i, hs[i])) // prefilled
	}
	st := e.Stats()
	if st.PrePlanStale <= stale {
		t.Fatalf("the new requests' prefill did not find the pre-plan stale: %+v", st)
	}

	// So does a cancellation.
	for _, h := range hs[len(first):] {
		ids = append(ids, h.ID())
	}
	// Decode rotates survivors to the back in batch order, and all eight
	// are in one batch: the running order is the submission order.
	whenPrePlanned("before the cancellation", ids, func() {
		stale = e.Stats().PrePlanStale
		hs[victim].Cancel()
	})
	if err := e.OnLoop(ctx, func() {}); err != nil { // the loop has dropped it
		t.Fatal(err)
	}
	if st := e.Stats(); st.PrePlanStale <= stale {
		t.Fatalf("the cancellation did not find the pre-plan stale: %+v", st)
	}

	reasons := make([]string, len(hs))
	for i, h := range hs {
		for o := range h.Outputs() {
			if o.Done {
				if o.Err != nil {
					t.Fatalf("request %d: %v", i, o.Err)
				}
				reasons[i] = o.Reason
				break
			}
			got[i] = append(got[i], o.Token)
		}
	}
	for i := range hs {
		if i == victim {
			if reasons[i] != "cancelled" || !slices.Equal(got[i], want[i][:len(got[i])]) {
				t.Errorf("cancelled request %d ended %q with %v, want a prefix of %v", i, reasons[i], got[i], want[i])
			}
			continue
		}
		if reasons[i] != "length" || !slices.Equal(got[i], want[i]) {
			t.Errorf("request %d after a stale pre-plan ended %q with\n%v\nalone and eager:\n%v", i, reasons[i], got[i], want[i])
		}
	}

	var used, free int
	if err := e.OnLoop(ctx, func() { used, free = e.KV().UsedPages(), e.KV().FreePages() }); err != nil {
		t.Fatal(err)
	}
	st = e.Stats()
	if pages := e.KV().Config().Pages - 1; used != 0 || st.KVPagesUsed != 0 || free != pages || st.KVPagesFree != pages {
		t.Errorf("after every request ended: %d pages used (stats %d), %d free (stats %d), want 0 used and %d free",
			used, st.KVPagesUsed, free, st.KVPagesFree, pages)
	}
	if st.PrePlanHits == 0 {
		t.Errorf("no pre-planned step was ever used: %+v", st)
	}
}

// Pre-plan declares its step on the bucket's cached template rows
// (DeclareInputsFor) addressed by StepIDs (the real requests, then the
// slot's padding rows), as the seed's engine does, instead of building rows
// afresh each step (issue 19, item 5).
func TestPrePlanUsesDeclareRows(t *testing.T) {
	s := start(t, true, engine.Options{}, llama.Options{DecodeBatchSizes: []int{1, 2, 4}, PrefillLengths: []int{16}, PrefillBatchSizes: []int{1, 4}})
	e := s.e
	ctx := context.Background()
	var hs []*engine.Handle
	for _, p := range []string{"Once upon a time", "The little dog", "A big red ball"} {
		h, err := e.Submit(ctx, engine.Request{Prompt: tokens(s.tok, p), MaxTokens: 60})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	for try := 0; ; try++ {
		var ids []int64
		var shared bool
		if err := e.OnLoop(ctx, func() { ids, shared = e.PrePlanRows() }); err != nil {
			t.Fatal(err)
		}
		want := []int64{hs[0].ID(), hs[1].ID(), hs[2].ID()}
		if n := len(ids); n > 0 && n < 3 && slices.Equal(ids, want[:n]) {
			// The loop stepped before the last Submit arrived: a pre-plan
			// of the requests so far, in a bucket without padding. Wait
			// for the step that holds all three.
			ids = nil
		}
		if ids != nil {
			if len(ids) != 4 || !slices.Equal(ids[:3], want) || ids[3] >= -1 {
				t.Fatalf("pre-plan rows %v, want %v then one padding row", ids, want)
			}
			if !shared {
				t.Fatal("the pre-plan built its rows instead of using the bucket's declare rows")
			}
			break
		}
		if try == 200 {
			t.Fatal("no pre-plan after 200 steps")
		}
	}
	for _, h := range hs {
		h.Cancel()
	}
}
