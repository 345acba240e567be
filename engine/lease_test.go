package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/graph"
)

// rowState is one row's state in each resource, to compare before and after
// a step.
type rowState struct {
	kvNext, kvPages, kvPromise int
	posNext, posCommitted      int
	sampNext, sampCommitted    int
}

func (s rowState) String() string {
	return fmt.Sprintf("kv at %d with %d pages (%d promised), positions at %d (%d committed), sampler at %d (%d committed)",
		s.kvNext, s.kvPages, s.kvPromise, s.posNext, s.posCommitted, s.sampNext, s.sampCommitted)
}

// rowStateOf reads a row's state; ok is false when some resource does not
// know the row.
func rowStateOf(kv *kvCache, pos *positionsResource, samp *sampler, id int64) (rowState, bool) {
	k, ok1 := kv.reqs[id]
	p, ok2 := pos.reqs[id]
	s, ok3 := samp.reqs[id]
	if !ok1 || !ok2 || !ok3 {
		return rowState{}, false
	}
	return rowState{kvNext: k.next, kvPages: len(k.pages), kvPromise: k.promise,
		posNext: p.next, posCommitted: p.committed, sampNext: s.next, sampCommitted: s.committed}, true
}

// A step whose key differs from its lease's, or with more rows than the
// lease's bucket, is refused with ErrLeaseMismatch before anything is
// admitted: replaying it would compute another shape's graph on its inputs
// (silently wrong output), and a refusal that left rows admitted would run
// them one position ahead from then on.
func TestLeaseMismatchIsRefused(t *testing.T) {
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	kv, err := newKVCache(dev, kvConfig{Layers: 1, KVDim: 4, PageSize: 4, Pages: 12, MaxLen: 16})
	if err != nil {
		t.Fatal(err)
	}
	pos, samp := newPositions(dev), newSampler(dev)
	t.Cleanup(func() { kv.Close(dev); pos.Close(); samp.Close() })
	sr, err := newStepRunner(kv, pos, samp)
	if err != nil {
		t.Fatal(err)
	}
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	sg, err := accel.NewStager(dev, 4, 256)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sg.Close)

	// The lease's bucket: two decode rows of one token each, key info "cfg".
	bucket := graph.BucketKey{Walk: WalkDecode, BatchSize: 2, Tokens: 2, Key: "cfg"}
	if err := sr.BuildGraphBuffers([]graph.SlotSpec{{Bucket: bucket, Slot: 0}}); err != nil {
		t.Fatal(err)
	}
	ids := []int64{1, 2, 3}
	for _, id := range ids {
		if err := sr.Ingest(id, requestInfo{MaxLen: 12}); err != nil {
			t.Fatal(err)
		}
	}
	rows := func(n int) []graph.Row {
		out := make([]graph.Row, n)
		for i := range out {
			out[i] = graph.Row{ID: ids[i], Tokens: []int32{int32(5 + i)}}
		}
		return out
	}
	type snapshot struct {
		free, used int
		rows       map[int64]rowState
	}
	snap := func() snapshot {
		sn := snapshot{free: kv.FreePages(), used: kv.UsedPages(), rows: map[int64]rowState{}}
		for _, id := range ids {
			st, ok := rowStateOf(kv, pos, samp, id)
			if !ok {
				t.Fatalf("request %d is no longer open in every resource", id)
			}
			sn.rows[id] = st
		}
		return sn
	}
	// prepare runs slotSteps.prepare, turning a panic (what planning more
	// rows than a bucket's buffers hold does without the check) into an
	// error.
	prepare := func(p *slotSteps, step *Step) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("prepare panicked: %v", r)
			}
		}()
		return p.prepare(sr, s, sg, step)
	}

	// A control: the step the lease is for is admitted and remembered for
	// the lease's slot, so the refusals below are the check's, not an
	// unusable lease's.
	before := snap()
	var ok slotSteps
	lease := &graph.Lease{Bucket: bucket, Slot: 0}
	step := newStep(WalkDecode, "cfg", rows(2), 2, lease)
	if err := prepare(&ok, step); err != nil {
		t.Fatalf("a step of key %q with 2 rows on lease %v: %v", step.Key, bucket, err)
	}
	if got, err := ok.get(lease); err != nil || got != step {
		t.Fatalf("the prepared step is not remembered for its lease's slot: %v, %v", got, err)
	}
	if st := snap().rows[1]; st.posNext != 1 || st.kvNext != 1 || st.kvPages != 1 || st.sampNext != 1 {
		t.Fatalf("the matching step did not admit request 1: %v", st)
	}
	sr.Abort(step)
	if err := sr.Finish(step); err != nil {
		t.Fatal(err)
	}
	if after := snap(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("aborting the control step did not restore the resources:\nbefore %+v\nafter  %+v", before, after)
	}

	for _, c := range []struct {
		name string
		key  string
		rows int
	}{
		{"a lease for key info \"cfg\", a step for \"\"", "", 2},
		{"a lease for key info \"cfg\", a step for \"other\"", "other", 1},
		{"more rows than the lease's bucket", "cfg", 3},
		{"both", "", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := snap()
			var p slotSteps
			lease := &graph.Lease{Bucket: bucket, Slot: 0}
			step := newStep(WalkDecode, c.key, rows(c.rows), c.rows, lease)
			err := prepare(&p, step)
			if !errors.Is(err, ErrLeaseMismatch) {
				t.Errorf("a step of key %q with %d rows on lease %v: %v, want ErrLeaseMismatch", c.key, c.rows, bucket, err)
			}
			if len(step.State) != 0 || len(step.plans) != 0 {
				t.Errorf("the refused step holds admission records %v and plans %v", step.State, step.plans)
			}
			if got, _ := p.get(lease); got != nil {
				t.Errorf("the refused step is remembered for the lease's slot: a capture or replay would read its plans")
			}
			after := snap()
			if after.free != before.free || after.used != before.used {
				t.Errorf("KV pages after the refusal: %d free, %d used; before: %d free, %d used",
					after.free, after.used, before.free, before.used)
			}
			for _, id := range ids {
				if after.rows[id] != before.rows[id] {
					t.Errorf("request %d after the refusal: %v; before: %v", id, after.rows[id], before.rows[id])
				}
			}
			// Whatever was half done must not linger.
			if len(step.State) != 0 {
				sr.Abort(step)
			}
			_ = sr.Finish(step)
		})
	}
}
