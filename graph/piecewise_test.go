package graph

import (
	"context"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// region runs a fakeNode's forward as a region: the tokens come in as a
// device tensor of the real length; the plan puts the real rows' slots in the
// lease's buffer (the tail writes nothing).
func region(t *testing.T, r *Runner, n *fakeNode, walk string, toks []int32) (*RegionOutput, []Row) {
	t.Helper()
	rows := make([]Row, len(toks))
	for i, tok := range toks {
		rows[i] = Row{ID: int64(1000 + len(n.reqs)*len(toks) + i), Tokens: []int32{tok}}
	}
	lease := r.LeaseSlot(LeaseRequest{Walk: walk, Rows: len(rows), Tokens: len(toks)})
	if lease == nil {
		return nil, rows
	}
	in, err := accel.UploadI32(r.Stream(), toks, 1, len(toks))
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.RunRegion(lease, map[string]accel.Tensor{"tokens": in}, len(toks), nil, func(s accel.Stream) error {
		_, err := n.Prepare(s, lease, rows)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, rows
}

func readF32(t *testing.T, s accel.Stream, x accel.Tensor) []float32 {
	t.Helper()
	v, err := accel.DownloadF32(s, x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPiecewiseRegions(t *testing.T) {
	n := newFakeNode(t, false)
	pool, _ := n.dev.NewPool()
	defer pool.Release()
	cfgA := &Config{Walk: "a", Batched: &Batched{TokensPerRow: 1}, BatchSizes: []int{2, 4, 8}}
	cfgB := &Config{Walk: "b", Batched: &Batched{TokensPerRow: 1}, BatchSizes: []int{4}}
	// Two regions of one node share a pool; B's 2-row shape fails.
	n.fail[SlotSpec{Bucket: BucketKey{Walk: "a", BatchSize: 2, Tokens: 2}}] = "error"
	ra := newRunner(t, n, []*Config{cfgA}, Options{Name: "a", Pool: pool})
	rb := newRunner(t, n, []*Config{cfgB}, Options{Name: "b", Pool: pool})
	for _, r := range []*Runner{ra, rb} {
		if _, err := r.Prepare(); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []*Runner{ra, rb} {
		if err := r.Capture(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if d := ra.droppedKeys(); len(d) != 1 || d[0].BatchSize != 2 {
		t.Fatalf("dropped %v", d)
	}

	toksA := []int32{3, 1, 4}
	outA, rowsA := region(t, ra, n, "a", toksA)
	if outA == nil {
		t.Fatal("a 3-row region should replay the 4-row shape")
	}
	if outA.Len() != 3 {
		t.Fatalf("region output has %d real rows", outA.Len())
	}
	viewA, _ := outA.View("y")
	gotA := readF32(t, ra.Stream(), viewA)
	wantA, _ := n.eager(rowsA)
	if !sameBits(gotA, wantA) {
		t.Fatal("region replay differs from eager")
	}
	copyA, err := outA.Get("y")
	if err != nil {
		t.Fatal(err)
	}

	// B replays in the same pool: A's outputs, outside the pool, survive.
	outB, rowsB := region(t, rb, n, "b", []int32{9, 9, 9, 9})
	if outB == nil {
		t.Fatal("b did not replay")
	}
	if got := readF32(t, ra.Stream(), viewA); !sameBits(got, wantA) {
		t.Fatal("another region's replay in the shared pool overwrote this region's outputs")
	}
	vb, _ := outB.View("y")
	wantB, _ := n.eager(rowsB)
	if !sameBits(readF32(t, rb.Stream(), vb), wantB) {
		t.Fatal("region b differs from eager")
	}

	// A's next replay overwrites its View, not the owned copy from Get.
	region(t, ra, n, "a", []int32{7, 7, 7})
	if got := readF32(t, ra.Stream(), viewA); sameBits(got, wantA) {
		t.Fatal("View did not alias the static buffer")
	}
	if got := readF32(t, ra.Stream(), copyA); !sameBits(got, wantA) {
		t.Fatal("Get's copy changed with the next replay")
	}
	// Each region replay counts its real and padding rows: A served 3 of 4
	// rows twice, B 4 of 4 once.
	for _, tc := range []struct {
		r                      *Runner
		walk                   string
		replays, real, padding int64
	}{{ra, "a", 2, 6, 2}, {rb, "b", 1, 4, 0}} {
		var got *BucketStats
		for _, b := range tc.r.Telemetry().Buckets {
			if b.Bucket == (BucketKey{Walk: tc.walk, BatchSize: 4, Tokens: 4}).String() {
				got = &b
			}
		}
		if got == nil || got.Replays != tc.replays || got.RealRows != tc.real || got.PaddingRows != tc.padding {
			t.Errorf("region %s telemetry %+v, want %d replays, %d real and %d padding rows", tc.walk, got, tc.replays, tc.real, tc.padding)
		}
	}
	// The dropped shape serves eager: a 2-row region gets no lease... it
	// fits the 4-row shape, the tightest left; one larger than any capture
	// gets none.
	if l := ra.LeaseSlot(LeaseRequest{Walk: "a", Rows: 2, Tokens: 2}); l == nil || l.Bucket.BatchSize != 4 {
		t.Fatalf("a 2-row region leased %v", l)
	}
	if out, _ := region(t, ra, n, "a", make([]int32, 9)); out != nil {
		t.Fatal("a 9-row region replayed")
	}
	if n.heldByPadding() != 0 {
		t.Fatal("padding rows hold storage after capture")
	}
}
