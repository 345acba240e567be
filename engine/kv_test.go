package engine

import (
	"errors"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/graph"
)

func newKV(t *testing.T, pages int) (*kvCache, accel.Stream, *accel.Stager) {
	t.Helper()
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	kv, err := newKVCache(dev, kvConfig{Layers: 1, KVDim: 4, PageSize: 4, Pages: pages, MaxLen: 32})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := dev.NewStream()
	st, _ := accel.NewStager(dev, 4, 256)
	return kv, s, st
}

func TestKVSinkAndPromises(t *testing.T) {
	kv, s, st := newKV(t, 5) // 4 pages besides the sink
	if kv.FreePages() != 4 {
		t.Fatalf("free %d, want 4 (the sink is never free)", kv.FreePages())
	}
	if err := kv.Ingest(1, requestInfo{MaxLen: 10}); err != nil { // 3 pages promised
		t.Fatal(err)
	}
	if kv.FreePages() != 1 {
		t.Fatalf("free %d after a 3-page promise", kv.FreePages())
	}
	if err := kv.Ingest(2, requestInfo{MaxLen: 8}); !errors.Is(err, errKVFull) {
		t.Fatalf("a request beyond what is free: %v", err)
	}
	pad := graph.PaddingHandle("kv-test/0")
	if err := kv.Ingest(pad, requestInfo{}); err != nil {
		t.Fatal(err)
	}
	// A replay step: request 1 with 6 tokens, a padding row with one.
	lease := &graph.Lease{Bucket: graph.BucketKey{Walk: "w", BatchSize: 2, Tokens: 8}}
	step := newStep("w", "", []graph.Row{{ID: 1, Tokens: make([]int32, 6)}, {ID: pad, Tokens: make([]int32, 1)}}, 1, nil)
	step.Tokens = 8
	step.Lease = lease
	if err := kv.BuildGraphBuffers([]graph.SlotSpec{{Bucket: lease.Bucket}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := kv.Admit(step); st != admitOK {
		t.Fatalf("admit: %v", st)
	}
	if kv.UsedPages() != 2 || kv.FreePages() != 1 {
		t.Fatalf("used %d free %d after 6 positions", kv.UsedPages(), kv.FreePages())
	}
	p, err := kv.Plan(s, st, step)
	if err != nil {
		t.Fatal(err)
	}
	plan := p.(*KVPlan)
	slots, _ := accel.DownloadI32(s, plan.Slots)
	pages, _ := accel.DownloadI32(s, plan.Pages)
	own := kv.reqs[1].pages
	want := []int32{own[0] * 4, own[0]*4 + 1, own[0]*4 + 2, own[0]*4 + 3, own[1] * 4, own[1]*4 + 1,
		SinkPage * 4, // the padding row writes into the sink
		-1}           // the bucket's tail writes nothing
	if !slices.Equal(slots, want) {
		t.Fatalf("slots %v, want %v", slots, want)
	}
	for i := 8; i < 16; i++ {
		if pages[i] != SinkPage {
			t.Fatalf("the padding row's page table %v is not all sink", pages[8:])
		}
	}
	// Undo gives the pages back to the promise.
	kv.Unadmit(step)
	if kv.UsedPages() != 0 || kv.FreePages() != 1 {
		t.Fatalf("after unadmit: used %d free %d", kv.UsedPages(), kv.FreePages())
	}
	kv.Remove(1)
	if kv.FreePages() != 4 {
		t.Fatalf("after remove: free %d", kv.FreePages())
	}
}

func TestKVCaptureTimePadding(t *testing.T) {
	kv, _, _ := newKV(t, 5)
	pad := graph.PaddingHandle("kv-test/capture")
	kv.Ingest(pad, requestInfo{})
	lease := &graph.Lease{Bucket: graph.BucketKey{Walk: "w", BatchSize: 1, Tokens: 5}, Capture: true}
	step := newStep("w", "", []graph.Row{{ID: pad, Tokens: make([]int32, 5)}}, 0, lease)
	if st, _ := kv.Admit(step); st != admitOK {
		t.Fatal("capture admit refused")
	}
	if kv.UsedPages() != 2 {
		t.Fatalf("a capture's padding row holds %d pages, want 2", kv.UsedPages())
	}
	kv.Reset(pad, true)
	if kv.UsedPages() != 0 {
		t.Fatal("reset with free kept the pages")
	}
}

// Padding never competes with real requests for pages: a capture's padding
// rows (the only padding that holds pages) and a request growing past its
// own promise may only take pages nobody was promised, even while the pages
// promised to others are still physically free.
func TestKVPromisedPagesAreNotLent(t *testing.T) {
	// admit admits one step of rows (id, token count) on lease.
	admit := func(kv *kvCache, lease *graph.Lease, rows ...[2]int64) (*Step, admitStatus, int) {
		var rs []graph.Row
		real := 0
		for _, r := range rows {
			rs = append(rs, graph.Row{ID: r[0], Tokens: make([]int32, r[1])})
			if !graph.IsPadding(r[0]) {
				real++
			}
		}
		step := newStep("w", "", rs, real, lease)
		st, short := kv.Admit(step)
		return step, st, short
	}
	check := func(kv *kvCache, when string, used, free int) {
		t.Helper()
		if kv.UsedPages() != used || kv.FreePages() != free {
			t.Fatalf("%s: used %d free %d, want used %d free %d", when, kv.UsedPages(), kv.FreePages(), used, free)
		}
	}

	t.Run("capture padding", func(t *testing.T) {
		// Page size 4; 4 pages besides the sink, all promised to request 1.
		kv, _, _ := newKV(t, 5)
		if err := kv.Ingest(1, requestInfo{MaxLen: 16}); err != nil {
			t.Fatal(err)
		}
		check(kv, "after the promise", 0, 0)
		pad := graph.PaddingHandle("kv-test/promise")
		if err := kv.Ingest(pad, requestInfo{}); err != nil {
			t.Fatal(err)
		}
		capture := &graph.Lease{Bucket: graph.BucketKey{Walk: "w", BatchSize: 1, Tokens: 5}, Capture: true}
		// 5 positions are 2 pages; all 4 physically free pages are request
		// 1's, so the padding row must be refused, 2 pages short.
		step, st, short := admit(kv, capture, [2]int64{pad, 5})
		if st != admitAllocFailed || short != 2 {
			t.Fatalf("a capture's padding row admitting 5 positions into promised pages: %v (%d short), want %v (2 short)", st, short, admitAllocFailed)
		}
		if _, ok := step.State[KVName]; ok || kv.reqs[pad].next != 0 || len(kv.reqs[pad].pages) != 0 {
			t.Fatalf("a refused admission left state: record %v, padding row at %d with pages %v",
				step.State[KVName], kv.reqs[pad].next, kv.reqs[pad].pages)
		}
		check(kv, "after the refusal", 0, 0)
		// Request 1 still gets every page it was promised.
		if _, st, short := admit(kv, nil, [2]int64{1, 16}); st != admitOK {
			t.Fatalf("request 1 admitting its 16 promised positions: %v (%d short)", st, short)
		}
		check(kv, "after request 1 took its promise", 4, 0)
		if got := kv.reqs[1].pages; len(got) != 4 || slices.Contains(got, SinkPage) {
			t.Fatalf("request 1 holds pages %v, want 4 besides the sink", got)
		}
		// Once request 1 is gone its pages are nobody's: the padding row fits.
		kv.Remove(1)
		check(kv, "after request 1 left", 0, 4)
		if _, st, short := admit(kv, capture, [2]int64{pad, 5}); st != admitOK {
			t.Fatalf("a capture's padding row with every page unpromised: %v (%d short)", st, short)
		}
		check(kv, "with the padding row's capture pages", 2, 2)
		kv.Reset(pad, true)
		check(kv, "after the padding row was reset", 0, 4)
	})

	t.Run("another request's growth", func(t *testing.T) {
		kv, _, _ := newKV(t, 5)
		if err := kv.Ingest(1, requestInfo{MaxLen: 12}); err != nil { // 3 pages promised
			t.Fatal(err)
		}
		if err := kv.Ingest(2, requestInfo{MaxLen: 4}); err != nil { // 1 page promised
			t.Fatal(err)
		}
		check(kv, "after both promises", 0, 0)
		// Request 2 fills its one promised page.
		if _, st, short := admit(kv, nil, [2]int64{2, 4}); st != admitOK {
			t.Fatalf("request 2 within its promise: %v (%d short)", st, short)
		}
		check(kv, "after request 2's prefill", 1, 0)
		// One more position needs a second page: 3 are physically free, but
		// all 3 are request 1's.
		step, st, short := admit(kv, nil, [2]int64{2, 1})
		if st != admitAllocFailed || short != 1 {
			t.Fatalf("request 2 growing past its promise into request 1's pages: %v (%d short), want %v (1 short)", st, short, admitAllocFailed)
		}
		if _, ok := step.State[KVName]; ok || kv.reqs[2].next != 4 || len(kv.reqs[2].pages) != 1 {
			t.Fatalf("a refused admission left state: record %v, request 2 at %d with pages %v",
				step.State[KVName], kv.reqs[2].next, kv.reqs[2].pages)
		}
		// Nor in a batch with request 1: the step is refused whole.
		if _, st, _ := admit(kv, nil, [2]int64{1, 1}, [2]int64{2, 1}); st != admitAllocFailed {
			t.Fatalf("a batch where request 2 grows past its promise: %v, want %v", st, admitAllocFailed)
		}
		check(kv, "after the refusals", 1, 0)
		// Request 1 grows to its whole promise, a step at a time.
		for _, n := range []int64{5, 4, 3} {
			if _, st, short := admit(kv, nil, [2]int64{1, n}); st != admitOK {
				t.Fatalf("request 1 admitting %d more positions of its promise: %v (%d short)", n, st, short)
			}
		}
		check(kv, "after request 1 took its promise", 4, 0)
		if p1, p2 := kv.reqs[1].pages, kv.reqs[2].pages; len(p1) != 3 || len(p2) != 1 || slices.Contains(p1, p2[0]) {
			t.Fatalf("request 1 holds %v, request 2 %v", p1, p2)
		}
	})
}

// A fork is promised exactly what admission reserves for it
// (forkPromise): opening it takes that many free pages, and growing to
// its last position allocates them all and no more.
func TestKVForkPromiseIsExact(t *testing.T) {
	for prompt := 2; prompt <= 10; prompt++ {
		for _, gen := range []int{1, 3, 9} {
			kv, _, _ := newKV(t, 33)
			maxLen := prompt + gen - 1
			if err := kv.Ingest(1, requestInfo{MaxLen: maxLen}); err != nil {
				t.Fatal(err)
			}
			if st, _ := kv.Admit(newStep("w", "", []graph.Row{{ID: 1, Tokens: make([]int32, prompt)}}, 1, nil)); st != admitOK {
				t.Fatalf("prompt %d: prefill admit %v", prompt, st)
			}
			at := prompt - 1
			for f := int64(2); f <= 4; f++ {
				free := kv.FreePages()
				if err := kv.Ingest(f, requestInfo{MaxLen: maxLen, Fork: &forkInfo{Parent: 1, At: at}}); err != nil {
					t.Fatal(err)
				}
				want := kv.forkPromise(at, maxLen)
				if got := free - kv.FreePages(); got != want {
					t.Fatalf("prompt %d, %d positions: a fork took %d pages, forkPromise says %d", prompt, maxLen, got, want)
				}
				if st, _ := kv.Admit(newStep("w", "", []graph.Row{{ID: f, Tokens: make([]int32, maxLen-at)}}, 1, nil)); st != admitOK {
					t.Fatalf("prompt %d: the fork's decode admit %v", prompt, st)
				}
				if st := kv.reqs[f]; st.allocs != st.promise || kv.FreePages() != free-want {
					t.Fatalf("prompt %d, %d positions: the fork allocated %d of its %d promised pages (free %d, want %d)",
						prompt, maxLen, st.allocs, st.promise, kv.FreePages(), free-want)
				}
			}
		}
	}
}
