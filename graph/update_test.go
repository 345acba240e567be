package graph

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// Update re-records every slot for new weights (new buffers of the same
// shapes) and updates its executable in place: replays then read the new
// weights and equal the eager step on them, with no new executable.
func TestUpdateTakesNewWeightsInPlace(t *testing.T) {
	n := newFakeNode(t, true)
	r := newRunner(t, n, []*Config{decodeConfig()}, Options{})
	if err := r.Capture(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	next := int64(0)
	replayEager := func(bs int) (got, want []float32) {
		t.Helper()
		rows := func() []Row {
			rs := make([]Row, bs)
			for i := range rs {
				rs[i] = Row{ID: next, Tokens: []int32{int32((i*5 + bs) % n.v)}}
				next++
			}
			return rs
		}
		want, _ = n.eager(rows())
		lease := r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: bs, Tokens: bs})
		if lease == nil {
			t.Fatalf("bs=%d: no bucket", bs)
		}
		outs := replayRows(t, r, n, lease, rows())
		y, err := accel.DownloadF32(r.Stream(), outs["y"])
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Release(lease, bs); err != nil {
			t.Fatal(err)
		}
		return y[:bs*n.d], want
	}
	before, _ := replayEager(3)
	execs := map[*Slot]accel.Exec{}
	for _, b := range r.buckets {
		for _, s := range b.Slots {
			execs[s] = s.exec
		}
	}
	// New weights, in a new buffer of the same shape.
	rng := rand.New(rand.NewPCG(9, 9))
	v := make([]float32, n.d*n.d)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * 0.3)
	}
	w, err := accel.UploadF32(n.s, v, n.d, n.d)
	if err != nil {
		t.Fatal(err)
	}
	old := n.w
	n.w = w
	res, err := r.Update()
	if err != nil {
		t.Fatal(err)
	}
	if res.InPlace != len(execs) || res.Recaptured != 0 {
		t.Fatalf("update %+v, want all %d slots in place", res, len(execs))
	}
	_ = n.dev.Free(old.Buf)
	for s, e := range execs {
		if s.exec != e {
			t.Fatal("a slot took a new executable")
		}
	}
	// Both slots of every bucket, twice each: replays equal eager on the
	// new weights.
	for _, bs := range []int{1, 3, 3, 8, 8, 64, 64} {
		got, want := replayEager(bs)
		if !sameBits(got, want) {
			t.Fatalf("bs=%d: replay after update differs from eager", bs)
		}
	}
	if after, _ := replayEager(3); slices.Equal(accel.F32Bytes(after), accel.F32Bytes(before)) {
		t.Fatal("replays after the update still read the old weights")
	}
}
