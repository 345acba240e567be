package engine

import (
	"errors"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/graph"
)

func newKV(t *testing.T, pages int) (*KVCache, accel.Stream, *accel.Stager) {
	t.Helper()
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	kv, err := NewKVCache(dev, KVConfig{Layers: 1, KVDim: 4, PageSize: 4, Pages: pages, MaxLen: 32})
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
	if err := kv.Ingest(1, RequestInfo{MaxLen: 10}); err != nil { // 3 pages promised
		t.Fatal(err)
	}
	if kv.FreePages() != 1 || kv.CanHold(5) {
		t.Fatalf("free %d after a 3-page promise", kv.FreePages())
	}
	if err := kv.Ingest(2, RequestInfo{MaxLen: 8}); !errors.Is(err, ErrKVFull) {
		t.Fatalf("a request beyond what is free: %v", err)
	}
	pad := graph.PaddingHandle("kv-test/0")
	if err := kv.Ingest(pad, RequestInfo{}); err != nil {
		t.Fatal(err)
	}
	// A replay step: request 1 with 6 tokens, a padding row with one.
	lease := &graph.Lease{Bucket: graph.BucketKey{Walk: "w", BatchSize: 2, Tokens: 8}}
	step := NewStep("w", "", []graph.Row{{ID: 1, Tokens: make([]int32, 6)}, {ID: pad, Tokens: make([]int32, 1)}}, 1, nil)
	step.Tokens = 8
	step.Lease = lease
	if err := kv.BuildGraphBuffers([]graph.SlotSpec{{Bucket: lease.Bucket}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := kv.Admit(step); st != Admitted {
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
	kv.Ingest(pad, RequestInfo{})
	lease := &graph.Lease{Bucket: graph.BucketKey{Walk: "w", BatchSize: 1, Tokens: 5}, Capture: true}
	step := NewStep("w", "", []graph.Row{{ID: pad, Tokens: make([]int32, 5)}}, 0, lease)
	if st, _ := kv.Admit(step); st != Admitted {
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
