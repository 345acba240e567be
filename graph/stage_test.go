package graph

import (
	"context"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// A step with fewer tokens than its packed bucket stages its inputs into the
// head of the static buffers and zeroes the tail: the padding positions never
// see a previous step's tokens. Covered for the whole-step replay
// (RunForward) and for a region (RunRegion), which stage separately.
func TestStaticInputTailZeroed(t *testing.T) {
	bucket := BucketKey{Walk: "prefill", BatchSize: 2, Tokens: 8}
	// run replays a step of rows on lease l, staging its tokens the way the
	// path under test does.
	paths := []struct {
		name string
		run  func(t *testing.T, r *Runner, n *fakeNode, l *Lease, rows []Row)
	}{
		{"RunForward", func(t *testing.T, r *Runner, n *fakeNode, l *Lease, rows []Row) {
			replayRows(t, r, n, l, rows)
		}},
		{"RunRegion", func(t *testing.T, r *Runner, n *fakeNode, l *Lease, rows []Row) {
			var toks []int32
			for _, row := range rows {
				toks = append(toks, row.Tokens...)
			}
			// The real-length input, allocated and freed in the replay
			// stream's order.
			buf, err := r.Stream().Alloc(int64(len(toks)) * 4)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Stream().Free(buf)
			if err := accel.Upload(r.Stream(), buf, accel.I32Bytes(toks)); err != nil {
				t.Fatal(err)
			}
			in := accel.Tensor{Buf: buf, DType: accel.I32, Rows: 1, Cols: len(toks)}
			if _, err := r.RunRegion(l, map[string]accel.Tensor{"tokens": in}, len(toks), nil, func(s accel.Stream) error {
				_, err := n.Prepare(s, l, rows)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			n := newFakeNode(t, false)
			cfg := &Config{Walk: "prefill", Packed: &Packed{TokenLengths: []int{8}}, BatchSizes: []int{2}}
			r := newRunner(t, n, []*Config{cfg}, Options{})
			if err := r.Capture(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			if got := r.Buckets(); !slices.Equal(got, []BucketKey{bucket}) {
				t.Fatalf("registered %v, want %v", got, bucket)
			}
			static := r.lookupBucket(bucket).Slots[0].static["tokens"]
			if static.Rows != 1 || static.Cols != 8 {
				t.Fatalf("static tokens %v, want 1x8", static)
			}
			read := func() []int32 {
				t.Helper()
				v, err := accel.DownloadI32(r.Stream(), static)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			step := func(rows []Row) {
				t.Helper()
				tokens := 0
				for _, row := range rows {
					tokens += len(row.Tokens)
				}
				l := r.LeaseSlot(LeaseRequest{Walk: "prefill", Rows: len(rows), Tokens: tokens})
				if l == nil || l.Bucket != bucket {
					t.Fatalf("%d rows of %d tokens leased %v, want %v", len(rows), tokens, l, bucket)
				}
				p.run(t, r, n, l, rows)
				if err := r.Release(l, len(rows)); err != nil {
					t.Fatal(err)
				}
			}

			// A full step: every position of the buffer holds a token.
			step([]Row{{ID: 1, Tokens: []int32{11, 12, 13, 14, 15}}, {ID: 2, Tokens: []int32{16, 17, 18}}})
			if got, want := read(), []int32{11, 12, 13, 14, 15, 16, 17, 18}; !slices.Equal(got, want) {
				t.Fatalf("after the 8-token step the static tokens are %v, want %v", got, want)
			}
			// A 3-token step in the same bucket: the head is its tokens, the
			// tail (positions 3..7) zero, not the previous step's 14..18.
			step([]Row{{ID: 3, Tokens: []int32{21, 22, 23}}})
			if got, want := read(), []int32{21, 22, 23, 0, 0, 0, 0, 0}; !slices.Equal(got, want) {
				t.Fatalf("after the 3-token step the static tokens are %v, want %v (the padded tail zeroed)", got, want)
			}
		})
	}
}
