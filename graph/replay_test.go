package graph

import (
	"context"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// registered builds a runner whose buckets are registered directly, for
// selection tests that need no capture.
func registered(t *testing.T, cfgs []*Config, slots int) *Runner {
	t.Helper()
	r := &Runner{name: "sel", nslots: slots, buckets: map[BucketKey]*Bucket{}, byWalk: map[string][]*Bucket{},
		counters: map[BucketKey]int{}, declare: map[SlotKey][]Row{}}
	r.tele.init()
	for ci, c := range cfgs {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		for _, sh := range c.shapes() {
			k := BucketKey{Walk: c.Walk, BatchSize: sh[0], Tokens: sh[1], Key: c.KeyInfo}
			r.register(&Bucket{Key: k, Config: c, ConfigIdx: ci, Slots: make([]*Slot, slots)})
		}
	}
	return r
}

func TestSelectBucket(t *testing.T) {
	decode := &Config{Walk: "decode", ReplayWalks: []string{"verify"}, Batched: &Batched{TokensPerRow: 1}, BatchSizes: []int{1, 4, 16}, CapEagerBatch: true}
	guided := &Config{Walk: "decode", KeyInfo: "cfg", Batched: &Batched{TokensPerRow: 1, Multiplier: 2}, BatchSizes: []int{2, 8}}
	images := &Config{Walk: "image", Packed: &Packed{TokenLengths: []int{64, 256}}, BatchSizes: []int{1, 2}}
	images2 := &Config{Walk: "image", Packed: &Packed{TokenLengths: []int{100}}, BatchSizes: []int{4}}
	r := registered(t, []*Config{decode, guided, images, images2}, 2)
	cases := []struct {
		walk       string
		bs, tokens int
		key        string
		want       string // "" for none
	}{
		{"decode", 1, 1, "", "decode[bs=1,tokens=1,key=]"},
		{"decode", 3, 3, "", "decode[bs=4,tokens=4,key=]"},
		{"decode", 16, 16, "", "decode[bs=16,tokens=16,key=]"},
		{"decode", 17, 17, "", ""},
		{"verify", 2, 2, "", "decode[bs=4,tokens=4,key=]"}, // an alias replays the capture walk
		{"decode", 2, 2, "cfg", "decode[bs=2,tokens=4,key=cfg]"},
		{"decode", 3, 3, "cfg", "decode[bs=8,tokens=16,key=cfg]"}, // 3 tokens × multiplier 2 = 6
		{"decode", 2, 2, "other", ""},
		{"image", 1, 50, "", "image[bs=1,tokens=64,key=]"},
		{"image", 2, 65, "", "image[bs=4,tokens=100,key=]"}, // fewer tokens beats fewer rows
		{"image", 3, 65, "", "image[bs=4,tokens=100,key=]"},
		{"image", 1, 101, "", "image[bs=1,tokens=256,key=]"},
		{"image", 3, 101, "", ""},
		{"prefill", 1, 1, "", ""},
	}
	for _, c := range cases {
		got := ""
		if b := r.SelectBucket(c.walk, c.bs, c.tokens, c.key); b != nil {
			got = b.Key.String()
		}
		if got != c.want {
			t.Errorf("SelectBucket(%s, bs=%d, tokens=%d, %q) = %q, want %q", c.walk, c.bs, c.tokens, c.key, got, c.want)
		}
	}
	if b := r.SelectBatchedBucket("image", 1, ""); b != nil {
		t.Errorf("a packed capture answered a batched selection: %v", b.Key)
	}
	if b := r.SelectBatchedBucket("decode", 5, ""); b == nil || b.Key.BatchSize != 16 {
		t.Errorf("batched selection for 5 rows: %v", b)
	}
	if b := r.SelectBatchedBucket("decode", 3, "cfg"); b == nil || b.Key.Tokens != 16 {
		t.Errorf("batched selection with a multiplier: %v", b)
	}
	if got := r.MaxBatchSizeFor("decode"); got != 16 {
		t.Errorf("MaxBatchSizeFor(decode) = %d (the guided config does not cap)", got)
	}
	if got := r.MaxBatchSizeFor("image"); got != 0 {
		t.Errorf("MaxBatchSizeFor(image) = %d, want no cap", got)
	}
	if !r.CapturesWalk("verify") || r.CapturesWalk("prefill") || !r.canRun("image", 2, 200, "") {
		t.Error("CapturesWalk / CanRun")
	}
	// A lease through an alias names the capture walk.
	if l := r.LeaseSlot(LeaseRequest{Walk: "verify", Rows: 1, Tokens: 1}); l.Bucket.Walk != "decode" {
		t.Errorf("lease through an alias names %q", l.Bucket.Walk)
	}
}

func TestLeaseSlots(t *testing.T) {
	r := registered(t, []*Config{{Walk: "decode", Batched: &Batched{TokensPerRow: 1}, BatchSizes: []int{1, 4}}}, 2)
	var got []int
	for i := 0; i < 5; i++ {
		got = append(got, r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: 1, Tokens: 1}).Slot)
	}
	if !slices.Equal(got, []int{0, 1, 0, 1, 0}) {
		t.Fatalf("slots %v do not alternate", got)
	}
	// Another bucket has its own counter.
	if s := r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: 3, Tokens: 3}).Slot; s != 0 {
		t.Fatalf("bs=4's first lease took slot %d", s)
	}
	// A reserved slot is passed back and does not advance the counter.
	if s := r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: 1, Tokens: 1, PinSlot: true, Slot: 1}).Slot; s != 1 {
		t.Fatalf("reserved slot 1 came back as %d", s)
	}
	if s := r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: 1, Tokens: 1}).Slot; s != 1 {
		t.Fatalf("the counter moved on a reserved lease: %d", s)
	}
	if r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: 5, Tokens: 5}) != nil {
		t.Fatal("a lease for a batch larger than any capture")
	}
}

// TestReplayEqualsEager serves every real batch size from 1 to 64 through the
// tightest bucket and compares with eager: the outputs of the real rows and
// what they wrote into the KV cache must be bit-identical, and the padding
// rows must write nothing outside the sink.
func TestReplayEqualsEager(t *testing.T) {
	n := newFakeNode(t, true)
	r := newRunner(t, n, []*Config{decodeConfig()}, Options{})
	if err := r.Capture(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if len(r.Buckets()) != 7 {
		t.Fatalf("registered %v", r.Buckets())
	}
	next := int64(0)
	for bs := 1; bs <= 64; bs++ {
		rows := func() []Row {
			rs := make([]Row, bs)
			for i := range rs {
				rs[i] = Row{ID: next, Tokens: []int32{int32((i*7 + bs) % n.v)}}
				next++
			}
			return rs
		}
		eagerRows := rows()
		wantY, wantNext := n.eager(eagerRows)

		real := rows()
		lease := r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: bs, Tokens: bs})
		if lease == nil {
			t.Fatalf("bs=%d: no bucket", bs)
		}
		outs := replayRows(t, r, n, lease, real)
		gotY, err := accel.DownloadF32(r.Stream(), outs["y"])
		if err != nil {
			t.Fatal(err)
		}
		gotNext, err := accel.DownloadI32(r.Stream(), outs["next"])
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Release(lease, bs); err != nil {
			t.Fatal(err)
		}
		if !sameBits(gotY[:bs*n.d], wantY) || !slices.Equal(gotNext[:bs], wantNext) {
			t.Fatalf("bs=%d (bucket %v): replay differs from eager", bs, lease.Bucket)
		}
		cache := n.readCache()
		for i := range real {
			if !sameBits(n.cacheRows(cache, real[i].ID), n.cacheRows(cache, eagerRows[i].ID)) {
				t.Fatalf("bs=%d: row %d's cache differs between replay and eager", bs, i)
			}
		}
	}
	if held := n.heldByPadding(); held != 0 {
		t.Fatalf("padding rows hold %d slots after replays", held)
	}
	tel := r.Telemetry()
	var replays, padding int64
	for _, b := range tel.Buckets {
		replays += b.Replays
		padding += b.PaddingRows
	}
	if replays != 64 {
		t.Fatalf("telemetry counts %d replays", replays)
	}
	// Padding served: sum over bs of (bucket - bs).
	want := int64(0)
	for bs := 1; bs <= 64; bs++ {
		b := 1
		for b < bs {
			b *= 2
		}
		want += int64(b - bs)
	}
	if padding != want {
		t.Fatalf("telemetry counts %d padding rows, want %d", padding, want)
	}
}
