package graph

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/comm"
)

func newRunner(t *testing.T, n *fakeNode, cfgs []*Config, opts Options) *Runner {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	}
	r, err := New(n.dev, n, cfgs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func small() *Config {
	c := decodeConfig()
	c.BatchSizes = []int{1, 2, 4}
	return c
}

func TestSlotsRegisterInOrder(t *testing.T) {
	n := newFakeNode(t, true)
	r := newRunner(t, n, []*Config{small()}, Options{})
	if err := r.Capture(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if got := r.Buckets(); len(got) != 3 {
		t.Fatalf("buckets %v", got)
	}
	for _, k := range r.Buckets() {
		b := r.lookupBucket(k)
		if len(b.Slots) != 2 {
			t.Fatalf("%v has %d slots", k, len(b.Slots))
		}
		for i, s := range b.Slots {
			if s == nil || s.exec == nil {
				t.Fatalf("%v slot %d missing", k, i)
			}
		}
	}
	// Captured largest first, slot 0 before slot 1.
	var order []string
	for _, sp := range n.captures {
		order = append(order, fmt.Sprintf("%d/%d", sp.Bucket.BatchSize, sp.Slot))
	}
	if want := []string{"4/0", "4/1", "2/0", "2/1", "1/0", "1/1"}; !slices.Equal(order, want) {
		t.Fatalf("capture order %v, want %v", order, want)
	}
	// Every buffer was built before the first capture, for every spec.
	if len(n.built) != 6 {
		t.Fatalf("built %d specs' buffers", len(n.built))
	}
}

func TestSingleSlotRunner(t *testing.T) {
	n := newFakeNode(t, false)
	r := newRunner(t, n, []*Config{small()}, Options{})
	if r.NumSlots() != 1 {
		t.Fatalf("%d slots without pre-planning or a forced double buffer", r.NumSlots())
	}
	if err := r.Capture(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	for _, k := range r.Buckets() {
		if got := len(r.lookupBucket(k).Slots); got != 1 {
			t.Fatalf("%v has %d slots", k, got)
		}
	}
	l1 := r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: 1, AheadOfInputs: true})
	l2 := r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: 1, AheadOfInputs: true})
	if l1.Slot != 0 || l2.Slot != 0 {
		t.Fatalf("single-slot leases %d, %d", l1.Slot, l2.Slot)
	}
}

func TestFailureIsolation(t *testing.T) {
	for _, mode := range []string{"error", "panic", "sync"} {
		t.Run(mode, func(t *testing.T) {
			n := newFakeNode(t, true)
			// Slot 1 of bs=2 fails: the whole bucket goes, the others stay.
			n.fail[SlotSpec{Bucket: BucketKey{Walk: "decode", BatchSize: 2, Tokens: 2}, Slot: 1}] = mode
			var logs bytes.Buffer
			r := newRunner(t, n, []*Config{small()}, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err := r.Capture(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			got := r.Buckets()
			if len(got) != 2 || got[0].BatchSize != 4 || got[1].BatchSize != 1 {
				t.Fatalf("registered %v, want bs 4 and 1", got)
			}
			dropped := r.droppedKeys()
			if len(dropped) != 1 || dropped[0].BatchSize != 2 {
				t.Fatalf("dropped %v", dropped)
			}
			// Logged at ERROR by name.
			if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "decode[bs=2,tokens=2,key=]") {
				t.Fatalf("no ERROR naming the bucket:\n%s", logs.String())
			}
			// The stream and the pool took the captures after the failure
			// (bs=1 captured after bs=2 failed), and the stream is usable.
			if r.Stream().Capturing() {
				t.Fatal("stream left capturing")
			}
			if r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: 2, AheadOfInputs: true}).Bucket.BatchSize != 4 {
				t.Fatal("bs=2 should lease the bs=4 bucket")
			}
			if tel := r.Telemetry(); len(tel.Dropped) != 1 {
				t.Fatalf("telemetry dropped %v", tel.Dropped)
			}
		})
	}
}

func TestWarmupFailureDropsBucket(t *testing.T) {
	n := newFakeNode(t, true)
	n.failWarm[SlotSpec{Bucket: BucketKey{Walk: "decode", BatchSize: 4, Tokens: 4}, Slot: 0}] = true
	r := newRunner(t, n, []*Config{small()}, Options{})
	if err := r.Capture(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if got := r.Buckets(); len(got) != 2 || got[0].BatchSize != 2 {
		t.Fatalf("registered %v", got)
	}
}

func TestRequireGraphsSwitch(t *testing.T) {
	failing := func(t *testing.T, require bool) *Runner {
		n := newFakeNode(t, false)
		n.fail[SlotSpec{Bucket: BucketKey{Walk: "decode", BatchSize: 1, Tokens: 1}}] = "error"
		return newRunner(t, n, []*Config{small()}, Options{RequireGraphs: require})
	}
	t.Run("on", func(t *testing.T) {
		err := failing(t, true).Capture(context.Background(), nil)
		if !errors.Is(err, ErrGraphsRequired) || !strings.Contains(err.Error(), "decode[bs=1,tokens=1,key=]") {
			t.Fatalf("want ErrGraphsRequired naming the bucket, got %v", err)
		}
	})
	t.Run("off", func(t *testing.T) {
		if err := failing(t, false).Capture(context.Background(), nil); err != nil {
			t.Fatalf("with the switch off a drop is not an error: %v", err)
		}
	})
}

func TestBlockedResourcesRefusedBeforeAllocation(t *testing.T) {
	n := newFakeNode(t, false)
	n.blocked = []string{"recurrent"}
	before := n.dev.Allocator().Stats().Allocated
	r := newRunner(t, n, []*Config{small()}, Options{})
	if err := r.Capture(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if len(r.Buckets()) != 0 || len(n.built) != 0 {
		t.Fatalf("a blocked config was captured: %v", r.Buckets())
	}
	if got := r.eagerWalks()["decode"]; !slices.Equal(got, []string{"recurrent"}) {
		t.Fatalf("eager walks %v", r.eagerWalks())
	}
	if st := n.dev.Allocator().Stats(); st.Allocated != before {
		t.Fatalf("a blocked config allocated %d bytes", st.Allocated-before)
	}
}

func TestPaddingStorageReleasedAfterCapture(t *testing.T) {
	n := newFakeNode(t, true)
	r := newRunner(t, n, []*Config{small()}, Options{})
	if err := r.Capture(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if held := n.heldByPadding(); held != 0 {
		t.Fatalf("padding rows hold %d cache slots after capture", held)
	}
	if len(n.free) != fakeSlots-1 {
		t.Fatalf("%d free slots, want all but the sink", len(n.free))
	}
}

func TestSeqAxis(t *testing.T) {
	packed := func(axis map[string]int) *Config {
		// Two tokens a row: the "rowinfo" input is [1, bs], never the token
		// count, so only the override makes it a sequence input.
		return &Config{Walk: "decode", Batched: &Batched{TokensPerRow: 2}, BatchSizes: []int{1, 2, 4}, SeqAxis: axis}
	}
	t.Run("detected", func(t *testing.T) {
		n := newFakeNode(t, false)
		n.extraRows = true
		r := newRunner(t, n, []*Config{packed(nil)}, Options{})
		r.Capture(context.Background(), nil)
		// Without the override rowinfo has no sequence axis: the smaller
		// buckets' shapes do not match the largest's.
		if got := r.Buckets(); len(got) != 1 || got[0].BatchSize != 4 {
			t.Fatalf("registered %v", got)
		}
	})
	t.Run("override wins", func(t *testing.T) {
		n := newFakeNode(t, false)
		n.extraRows = true
		r := newRunner(t, n, []*Config{packed(map[string]int{"rowinfo": 1})}, Options{})
		if err := r.Capture(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		if got := r.Buckets(); len(got) != 3 {
			t.Fatalf("registered %v", got)
		}
	})
	t.Run("wrong order", func(t *testing.T) {
		n := newFakeNode(t, false)
		r := newRunner(t, n, []*Config{small()}, Options{})
		spec := func(bs int) SlotSpec {
			return SlotSpec{Bucket: BucketKey{Walk: "decode", BatchSize: bs, Tokens: bs}, Config: r.configs[0]}
		}
		if _, _, err := r.intern(spec(2), Inputs{"tokens": HostI32(make([]int32, 2))}); err != nil {
			t.Fatal(err)
		}
		_, _, err := r.intern(spec(4), Inputs{"tokens": HostI32(make([]int32, 4))})
		if !errors.Is(err, ErrCaptureOrder) {
			t.Fatalf("a larger capture after a smaller one: %v", err)
		}
	})
}

// Smaller buckets use leading slices of the largest bucket's static inputs.
func TestStaticInputsShareStorage(t *testing.T) {
	n := newFakeNode(t, true)
	r := newRunner(t, n, []*Config{small()}, Options{})
	if err := r.Capture(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	big := r.lookupBucket(BucketKey{Walk: "decode", BatchSize: 4, Tokens: 4}).Slots[0].static["tokens"]
	for _, bs := range []int{1, 2} {
		for slot := 0; slot < 2; slot++ {
			v := r.lookupBucket(BucketKey{Walk: "decode", BatchSize: bs, Tokens: bs}).Slots[slot].static["tokens"]
			if v.Buf.Memory() != big.Buf.Memory() || v.Buf.Offset() != big.Buf.Offset() || v.Cols != bs {
				t.Fatalf("bs=%d slot %d: %v is not a leading slice of %v", bs, slot, v.Buf, big.Buf)
			}
		}
	}
}

// ranks runs fn on n in-process ranks, each with its own device and node.
func ranks(t *testing.T, size int, setup func(rank int, n *fakeNode)) ([]*Runner, []*comm.Local) {
	t.Helper()
	group := comm.NewLocal(size)
	runners := make([]*Runner, size)
	for i := range runners {
		n := newFakeNode(t, true)
		setup(i, n)
		runners[i] = newRunner(t, n, []*Config{small()}, Options{Group: group[i], Name: fmt.Sprintf("rank%d", i)})
	}
	var wg sync.WaitGroup
	errs := make([]error, size)
	for i := range runners {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = runners[i].Capture(context.Background(), nil)
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return runners, group
}

func TestRanksAgree(t *testing.T) {
	k := func(bs int) BucketKey { return BucketKey{Walk: "decode", BatchSize: bs, Tokens: bs} }
	runners, group := ranks(t, 3, func(rank int, n *fakeNode) {
		switch rank {
		case 1:
			n.fail[SlotSpec{Bucket: k(4), Slot: 1}] = "error" // dropped on rank 1 only
		case 2:
			n.fail[SlotSpec{Bucket: k(1), Slot: 0}] = "panic" // dropped on rank 2 only
		}
	})
	for i, r := range runners {
		if got := r.Buckets(); len(got) != 1 || got[0] != k(2) {
			t.Errorf("rank %d registered %v, want only bs=2", i, got)
		}
		if got := r.droppedKeys(); len(got) != 2 {
			t.Errorf("rank %d dropped %v", i, got)
		}
	}
	// Every rank met the same number of barriers, pass or fail.
	for i, g := range group {
		if g.Collectives() != group[0].Collectives() {
			t.Fatalf("rank %d met %d collectives, rank 0 %d", i, g.Collectives(), group[0].Collectives())
		}
	}
	// One barrier per spec (3 buckets × 2 slots) and one agreement.
	if got := group[0].Collectives(); got != 7 {
		t.Fatalf("%d collectives, want 7", got)
	}
}

// countingGroup records the vectors agreed on.
type countingGroup struct {
	comm.Group
	gathered [][]int64
}

func (c *countingGroup) AllGather(ctx context.Context, v []int64) ([][]int64, error) {
	if len(v) > 0 {
		c.gathered = append(c.gathered, slices.Clone(v))
	}
	return c.Group.AllGather(ctx, v)
}

func TestAgreementCoversEveryCandidate(t *testing.T) {
	n := newFakeNode(t, true)
	n.fail[SlotSpec{Bucket: BucketKey{Walk: "decode", BatchSize: 2, Tokens: 2}, Slot: 0}] = "error"
	g := &countingGroup{Group: comm.Single()}
	prefill := &Config{Walk: "prefill", Packed: &Packed{TokenLengths: []int{8, 4}}, BatchSizes: []int{2}}
	r := newRunner(t, n, []*Config{small(), prefill}, Options{Group: g})
	if err := r.Capture(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if len(g.gathered) != 1 || len(g.gathered[0]) != 5 {
		t.Fatalf("agreed on %v, want one vector over all 5 candidates", g.gathered)
	}
	if want := []int64{1, 0, 1, 1, 1}; !slices.Equal(g.gathered[0], want) {
		t.Fatalf("flags %v, want %v (config order: decode 1,2,4 then prefill 8,4)", g.gathered[0], want)
	}
}

func TestPaddingHandles(t *testing.T) {
	seen := map[int64]string{}
	for _, prefix := range []string{"a", "b"} {
		p := NewPaddingRows(prefix, nil)
		for _, key := range []string{"0_slot0", "0_slot1", "1_slot0"} {
			for i, h := range p.Handles(key, 64) {
				if h >= Unset {
					t.Fatalf("handle %d is not below -1", h)
				}
				name := fmt.Sprintf("%s/%s/%d", prefix, key, i)
				if other, dup := seen[h]; dup && other != name {
					t.Fatalf("handle %d minted for %s and %s", h, other, name)
				}
				seen[h] = name
				if PaddingName(h) != name {
					t.Fatalf("PaddingName(%d) = %s", h, PaddingName(h))
				}
			}
		}
		// Stable: asking again gives the same handles.
		if !slices.Equal(p.Handles("0_slot0", 8), p.Handles("0_slot0", 8)) {
			t.Fatal("handles are not stable")
		}
	}
	if IsPadding(0) || IsPadding(Unset) || !IsPadding(-2) {
		t.Fatal("IsPadding")
	}
}

func TestStepIDsAndDeclareInputs(t *testing.T) {
	n := newFakeNode(t, true)
	c := small()
	r := newRunner(t, n, []*Config{c}, Options{})
	if err := r.Capture(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	l := r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: 3, Tokens: 3})
	ids, err := r.StepIDs(l, []int64{7, 8, 9})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 4 || ids[0] != 7 || ids[2] != 9 || !IsPadding(ids[3]) {
		t.Fatalf("step ids %v", ids)
	}
	rows, _ := r.DeclareInputsFor(l)
	again, _ := r.DeclareInputsFor(l)
	if len(rows) != 4 || &rows[0] != &again[0] {
		t.Fatal("declare inputs are not cached per bucket")
	}
	padded, err := r.PadInputs(l, []Row{{ID: 7, Tokens: []int32{1}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(padded) != 4 || !IsPadding(padded[1].ID) || len(padded[1].Tokens) != 1 {
		t.Fatalf("padded %v", padded)
	}

	// Packed: padding rows declare no tokens (they add nothing to the
	// step's token count and take no storage); real rows keep theirs.
	t.Run("packed", func(t *testing.T) {
		n := newFakeNode(t, true)
		c := &Config{Walk: "prefill", Packed: &Packed{TokenLengths: []int{8}}, BatchSizes: []int{4}}
		r := newRunner(t, n, []*Config{c}, Options{})
		if err := r.Capture(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		real := []Row{{ID: 7, Tokens: []int32{1, 2, 3}}, {ID: 8, Tokens: []int32{4}}}
		l := r.LeaseSlot(LeaseRequest{Walk: "prefill", Rows: len(real), Tokens: 4})
		if l == nil || !l.Packed() {
			t.Fatalf("lease %v, want a packed bucket", l)
		}
		padded, err := r.PadInputs(l, real)
		if err != nil {
			t.Fatal(err)
		}
		if len(padded) != 4 {
			t.Fatalf("padded to %d rows, want the bucket's 4", len(padded))
		}
		for i, row := range padded {
			if i < len(real) {
				if row.ID != real[i].ID || !slices.Equal(row.Tokens, real[i].Tokens) {
					t.Errorf("row %d is %+v, want the real row %+v", i, row, real[i])
				}
				continue
			}
			if !IsPadding(row.ID) || len(row.Tokens) != 0 {
				t.Errorf("padding row %d is %+v, want a padding handle with no tokens", i, row)
			}
		}
	})
}
