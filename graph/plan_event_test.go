package graph

import (
	"context"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// The replay waits on the plan-done event it is given. A step is pre-planned
// on the runner's plan stream while that stream is held back (it waits on a
// slow gate), so the plan's writes into the slot's plan buffer land late; the
// replay must read them, not the previous step's plan still in the buffer.
// A replay that ignored the event would finish before the plan landed, write
// the new step's KV rows over the previous step's slots and leave its own
// rows unwritten.
func TestReplayWaitsOnPlanEvent(t *testing.T) {
	// One slot: both steps replay the same slot, so the plan buffer holds
	// the first step's cache slots until the second step's plan lands.
	n := newFakeNode(t, false)
	st, err := accel.NewStager(n.dev, 8, 4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	r := newRunner(t, n, []*Config{small()}, Options{})
	if err := r.Capture(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	n.stager = st // from here on, Prepare stages its plan without waiting

	rowsOf := func(id0 int64, toks ...int32) []Row {
		rows := make([]Row, len(toks))
		for i, tok := range toks {
			rows[i] = Row{ID: id0 + int64(i), Tokens: []int32{tok}}
		}
		return rows
	}
	toksA, toksB := []int32{5, 6, 7, 8}, []int32{21, 22, 23}
	eagerA, eagerB := rowsOf(300, toksA...), rowsOf(400, toksB...)
	_, wantNextA := n.eager(eagerA)
	wantYB, wantNextB := n.eager(eagerB)

	// Step A replays normally: its plan is prepared on the replay stream.
	a := rowsOf(100, toksA...)
	la := r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: len(a), Tokens: len(a)})
	outs := replayRows(t, r, n, la, a)
	if got, err := accel.DownloadI32(r.Stream(), outs["next"]); err != nil || !slices.Equal(got[:len(a)], wantNextA) {
		t.Fatalf("step A: next %v (%v), want %v", got, err, wantNextA)
	}
	if err := r.Release(la, len(a)); err != nil {
		t.Fatal(err)
	}

	// Step B is pre-planned on the plan stream, held back by the gate.
	gate := acceltest.Gate(t, n.dev, 512, 20)
	plan := r.PlanStream()
	if err := plan.Wait(gate); err != nil {
		t.Fatal(err)
	}
	b := rowsOf(200, toksB...)
	lb := r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: len(b), Tokens: len(b)})
	if lb.Bucket != la.Bucket || lb.Slot != la.Slot {
		t.Fatalf("step B leased %v slot %d, step A %v slot %d: want the same slot", lb.Bucket, lb.Slot, la.Bucket, la.Slot)
	}
	padded, err := r.PadInputs(lb, b)
	if err != nil {
		t.Fatal(err)
	}
	in, err := n.Prepare(plan, lb, padded)
	if err != nil {
		t.Fatal(err)
	}
	planDone, err := n.dev.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.Record(planDone); err != nil {
		t.Fatal(err)
	}
	if gate.Query() {
		// The plan has landed already (this goroutine was held up longer
		// than the gate): an ignored event could not show this run, but the
		// results below must still be right, so carry on rather than fail
		// a loaded machine's run.
		t.Log("the gate finished before the replay was launched: the wait is not exercised this run")
	}
	if outs, err = r.RunForward(lb, in, planDone); err != nil {
		t.Fatal(err)
	}
	gotY, err := accel.DownloadF32(r.Stream(), outs["y"])
	if err != nil {
		t.Fatal(err)
	}
	gotNext, err := accel.DownloadI32(r.Stream(), outs["next"])
	if err != nil {
		t.Fatal(err)
	}
	// The replay stream has drained: the plan it was told to wait on must
	// have completed before it.
	if !planDone.Query() {
		t.Error("the replay ran before the plan-done event it was given completed")
	}
	if err := plan.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(lb, len(b)); err != nil {
		t.Fatal(err)
	}
	if !sameBits(gotY[:len(b)*n.d], wantYB) || !slices.Equal(gotNext[:len(b)], wantNextB) {
		t.Fatal("step B: outputs differ from eager")
	}
	cache := n.readCache()
	for i := range b {
		if !sameBits(n.cacheRows(cache, b[i].ID), n.cacheRows(cache, eagerB[i].ID)) {
			t.Errorf("step B row %d: its KV rows differ from eager (the replay used a stale plan)", i)
		}
	}
	for i := range a {
		if !sameBits(n.cacheRows(cache, a[i].ID), n.cacheRows(cache, eagerA[i].ID)) {
			t.Errorf("step A row %d: its KV rows were overwritten by step B's replay", i)
		}
	}
}
