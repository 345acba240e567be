package graph

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// warmAll prepares r and warms every spec with WarmNext, returning the specs
// in the order WarmNext warmed them.
func warmAll(t *testing.T, r *Runner) []SlotSpec {
	t.Helper()
	if _, err := r.Prepare(); err != nil {
		t.Fatal(err)
	}
	var order []SlotSpec
	for sp, more := r.WarmNext(); more; sp, more = r.WarmNext() {
		order = append(order, sp)
	}
	return order
}

// leased is the bucket a step of bs rows would replay on now (by its
// tokens, and before its inputs exist), or "eager".
func leased(r *Runner, bs int) string {
	l := r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: bs, Tokens: bs})
	lb := r.LeaseSlot(LeaseRequest{Walk: "decode", Rows: bs, AheadOfInputs: true})
	switch {
	case l == nil && lb == nil:
		return "eager"
	case l == nil || lb == nil || l.Bucket != lb.Bucket:
		return fmt.Sprintf("LeaseSlot disagrees: %v with tokens, %v without", l, lb)
	}
	return l.Bucket.String()
}

// The engine captures in the background the most requested bucket first
// (engine/background.go keeps the demand); what the runner owes it is that
// the order is free: once WarmNext has warmed every spec, largest first (so
// the static inputs are sized by the largest), CaptureBucket captures any
// bucket in any order, reusing the warm-up, and each bucket goes live alone
// the moment it is captured. Here the smallest bucket is the most requested.
func TestBackgroundCaptureInDemandOrder(t *testing.T) {
	n := newFakeNode(t, true)
	r := newRunner(t, n, []*Config{small()}, Options{})
	warmed := warmAll(t, r)
	if !slices.Equal(warmed, r.Specs()) {
		t.Fatalf("WarmNext warmed %v, want the specs largest first %v", warmed, r.Specs())
	}
	if len(n.captures) != 0 || len(r.Buckets()) != 0 {
		t.Fatalf("warming captured %v and registered %v", n.captures, r.Buckets())
	}
	// Nothing is leased before a capture: every size runs eager.
	for _, bs := range []int{1, 2, 3, 4} {
		if got := leased(r, bs); got != "eager" {
			t.Fatalf("before any capture bs=%d leased %s", bs, got)
		}
	}
	steps := []struct {
		capture BucketKey
		live    []BucketKey
		lease   map[int]string // step bs -> bucket (or eager)
	}{
		{bk(1), []BucketKey{bk(1)}, map[int]string{1: bk(1).String(), 2: "eager", 3: "eager", 4: "eager"}},
		{bk(4), []BucketKey{bk(4), bk(1)}, map[int]string{1: bk(1).String(), 2: bk(4).String(), 3: bk(4).String(), 4: bk(4).String()}},
		{bk(2), []BucketKey{bk(4), bk(2), bk(1)}, map[int]string{1: bk(1).String(), 2: bk(2).String(), 3: bk(4).String(), 4: bk(4).String()}},
	}
	for _, st := range steps {
		before := len(n.captures)
		if err := r.CaptureBucket(st.capture); err != nil {
			t.Fatalf("CaptureBucket(%v): %v", st.capture, err)
		}
		var got []string
		for _, sp := range n.captures[before:] {
			got = append(got, sp.String())
		}
		want := []string{SlotSpec{Bucket: st.capture}.String(), SlotSpec{Bucket: st.capture, Slot: 1}.String()}
		if !slices.Equal(got, want) {
			t.Fatalf("CaptureBucket(%v) captured %v, want %v", st.capture, got, want)
		}
		if live := r.Buckets(); !slices.Equal(live, st.live) {
			t.Fatalf("after capturing %v: live %v, want %v", st.capture, live, st.live)
		}
		for bs, want := range st.lease {
			if got := leased(r, bs); got != want {
				t.Errorf("after capturing %v: bs=%d leased %s, want %s", st.capture, bs, got, want)
			}
		}
		// Capturing again is a no-op.
		if err := r.CaptureBucket(st.capture); err != nil || len(n.captures) != before+2 {
			t.Fatalf("CaptureBucket(%v) again: %v, %d captures", st.capture, err, len(n.captures)-before)
		}
	}
	// The captures reused WarmNext's warm-ups: no spec ran a forward again.
	for _, sp := range r.Specs() {
		if got := n.warmups[sp.key()]; got != NumWarmup {
			t.Errorf("%v warmed %d times, want %d", sp, got, NumWarmup)
		}
	}
	if len(r.droppedKeys()) != 0 {
		t.Fatalf("dropped %v", r.droppedKeys())
	}
}

// A CaptureBucket whose step is not admitted (the resources are busy with real
// requests: ErrNotAdmitted) leaves the bucket pending: not registered, not
// dropped, not logged as a drop, its warm-ups kept. Here slot 0 captures and
// slot 1 is refused, so the refusal comes part way through the bucket. A
// later call captures and registers it from the same warm-ups.
func TestCaptureBucketNotAdmittedStaysPending(t *testing.T) {
	n := newFakeNode(t, true)
	var logs bytes.Buffer
	r := newRunner(t, n, []*Config{small()}, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	warmAll(t, r)
	if err := r.CaptureBucket(bk(4)); err != nil {
		t.Fatal(err)
	}
	busy := bk(2)
	n.refuse[SlotSpec{Bucket: busy, Slot: 1}] = 2
	for try := 1; try <= 2; try++ {
		before := len(n.captures)
		err := r.CaptureBucket(busy)
		if !errors.Is(err, ErrNotAdmitted) {
			t.Fatalf("try %d: CaptureBucket(%v) = %v, want ErrNotAdmitted", try, busy, err)
		}
		if got := n.captures[before:]; len(got) != 1 || got[0].Bucket != busy || got[0].Slot != 0 {
			t.Fatalf("try %d: captured %v, want slot 0 only (slot 1 refused)", try, got)
		}
		if r.lookupBucket(busy) != nil || slices.Contains(r.Buckets(), busy) {
			t.Fatalf("try %d: %v registered with a slot refused", try, busy)
		}
		if got := leased(r, 2); got != bk(4).String() {
			t.Fatalf("try %d: bs=2 leased %s, want %v (the refused bucket is not live)", try, got, bk(4))
		}
		if d := r.droppedKeys(); len(d) != 0 {
			t.Fatalf("try %d: backpressure dropped %v", try, d)
		}
		if lines := errorLines(logs.String(), busy.String()); len(lines) != 0 {
			t.Fatalf("try %d: backpressure logged at ERROR:\n%s", try, strings.Join(lines, "\n"))
		}
		if r.Stream().Capturing() {
			t.Fatalf("try %d: stream left capturing", try)
		}
	}
	if err := r.CaptureBucket(busy); err != nil {
		t.Fatalf("CaptureBucket(%v) once admitted: %v", busy, err)
	}
	if got := r.Buckets(); !slices.Equal(got, []BucketKey{bk(4), busy}) {
		t.Fatalf("registered %v, want bs=4 and bs=2", got)
	}
	if b := r.lookupBucket(busy); len(b.Slots) != 2 || b.Slots[0] == nil || b.Slots[1] == nil {
		t.Fatalf("%v registered with slots %v", busy, b.Slots)
	}
	if got := leased(r, 2); got != busy.String() {
		t.Fatalf("bs=2 leased %s, want %v", got, busy)
	}
	// The retries captured from the warm-ups WarmNext made.
	for _, sp := range r.Specs() {
		if got := n.warmups[sp.key()]; got != NumWarmup {
			t.Errorf("%v warmed %d times, want %d (a refusal must keep the warm-up)", sp, got, NumWarmup)
		}
	}
	if err := r.CaptureBucket(bk(1)); err != nil {
		t.Fatal(err)
	}
	if d := r.droppedKeys(); len(d) != 0 || strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("dropped %v:\n%s", d, logs.String())
	}
	if err := r.ReleasePadding(); err != nil {
		t.Fatal(err)
	}
	if held := n.heldByPadding(); held != 0 {
		t.Fatalf("padding rows hold %d cache slots after capture", held)
	}
}

// A bucket is never leased before it is live: while its slots are being
// captured (including the last one, after the earlier slots passed), neither
// selection nor a lease returns it; a step of its size takes a larger live
// bucket or runs eager. Checked from inside each captured forward.
func TestBucketNotLeasableWhileCapturing(t *testing.T) {
	type seen struct {
		spec    SlotSpec
		live    []BucketKey
		found   bool // Bucket(spec.Bucket) answered
		leases  map[int]string
		selects map[int]string
	}
	watch := func(n *fakeNode, r *Runner) *[]seen {
		var log []seen
		n.onCapture = func(spec SlotSpec) {
			s := seen{spec: spec, live: r.Buckets(), found: r.lookupBucket(spec.Bucket) != nil, leases: map[int]string{}, selects: map[int]string{}}
			for _, bs := range []int{1, 2, 4} {
				s.leases[bs] = leased(r, bs)
				s.selects[bs] = "eager"
				if b := r.SelectBucket("decode", bs, bs, ""); b != nil {
					s.selects[bs] = b.Key.String()
				}
			}
			log = append(log, s)
		}
		return &log
	}
	check := func(t *testing.T, log []seen, want func(s seen, bs int) string) {
		t.Helper()
		if len(log) == 0 {
			t.Fatal("no capture observed")
		}
		for _, s := range log {
			if s.found || slices.Contains(s.live, s.spec.Bucket) {
				t.Errorf("capturing %v: it is live already (%v)", s.spec, s.live)
			}
			for _, bs := range []int{1, 2, 4} {
				w := want(s, bs)
				if s.leases[bs] != w || s.selects[bs] != w {
					t.Errorf("capturing %v: bs=%d leased %s, selected %s, want %s", s.spec, bs, s.leases[bs], s.selects[bs], w)
				}
			}
		}
	}
	t.Run("background", func(t *testing.T) {
		n := newFakeNode(t, true)
		r := newRunner(t, n, []*Config{small()}, Options{})
		warmAll(t, r)
		log := watch(n, r)
		var done []BucketKey
		for _, k := range []BucketKey{bk(4), bk(1), bk(2)} {
			if err := r.CaptureBucket(k); err != nil {
				t.Fatal(err)
			}
			done = append(done, k)
		}
		if len(*log) != 6 {
			t.Fatalf("observed %d captures, want 6", len(*log))
		}
		// While capturing bs=4 nothing is live; while bs=1, bs=4 is; while
		// bs=2 (slot 0, then slot 1 after slot 0 passed), bs=4 and bs=1.
		check(t, *log, func(s seen, bs int) string {
			best := "eager"
			for _, k := range []BucketKey{bk(4), bk(2), bk(1)} { // largest first
				live := slices.Index(done, k) < slices.Index(done, s.spec.Bucket)
				if live && k.BatchSize >= bs {
					best = k.String()
				}
			}
			return best
		})
		if got := r.Buckets(); len(got) != 3 {
			t.Fatalf("registered %v", got)
		}
	})
	t.Run("Capture", func(t *testing.T) {
		// Capture registers buckets once every rank agreed: nothing is
		// leasable while any spec is being captured.
		n := newFakeNode(t, true)
		r := newRunner(t, n, []*Config{small()}, Options{})
		log := watch(n, r)
		if err := r.Capture(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		if len(*log) != 6 {
			t.Fatalf("observed %d captures, want 6", len(*log))
		}
		check(t, *log, func(seen, int) string { return "eager" })
		if got := r.Buckets(); len(got) != 3 {
			t.Fatalf("registered %v", got)
		}
	})
}

// A warm-up the step's resources refuse for now (real requests hold the
// memory its padding rows need, as while serving) is retried by the next
// WarmNext, not counted as a failure: the bucket is still planned and
// captured, and nothing is logged at ERROR.
func TestWarmNextRetriesWhenNotAdmitted(t *testing.T) {
	n := newFakeNode(t, true)
	var logs bytes.Buffer
	r := newRunner(t, n, []*Config{small()}, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if _, err := r.Prepare(); err != nil {
		t.Fatal(err)
	}
	busy := SlotSpec{Bucket: bk(2), Slot: 1}
	n.refuse[busy] = 2
	var order []SlotSpec
	for sp, more := r.WarmNext(); more; sp, more = r.WarmNext() {
		order = append(order, sp)
		if len(order) > 3*len(r.Specs()) {
			t.Fatalf("WarmNext does not finish: %v", order)
		}
	}
	var at []int
	for i, sp := range order {
		if sp.Bucket == busy.Bucket && sp.Slot == busy.Slot {
			at = append(at, i)
		}
	}
	if len(at) != 3 || at[1] != at[0]+1 || at[2] != at[0]+2 || len(order) != len(r.Specs())+2 {
		t.Fatalf("WarmNext returned %v, want %v three times in a row (refused twice, then warmed)", order, busy)
	}
	if got := n.warmups[busy.key()]; got != NumWarmup {
		t.Fatalf("%v warmed %d times after its refusals, want %d", busy, got, NumWarmup)
	}
	costs := r.measureCosts()
	if c, ok := costs[busy.Bucket]; !ok || c.Peak <= 0 {
		t.Fatalf("the refused bucket's cost %+v: it was not measured", c)
	}
	for _, k := range []BucketKey{bk(4), bk(2), bk(1)} {
		if err := r.CaptureBucket(k); err != nil {
			t.Fatalf("CaptureBucket(%v): %v", k, err)
		}
	}
	if got := r.Buckets(); !slices.Equal(got, []BucketKey{bk(4), bk(2), bk(1)}) {
		t.Fatalf("registered %v", got)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("backpressure logged at ERROR:\n%s", logs.String())
	}
}

// Sizing before serving has nothing that could free what a warm-up was
// refused: the refusal fails the bucket (it is not planned) instead of
// being retried forever.
func TestSizeFailsARefusedWarmup(t *testing.T) {
	n := newFakeNode(t, true)
	r := newRunner(t, n, []*Config{small()}, Options{Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))})
	busy := SlotSpec{Bucket: bk(2), Slot: 1}
	n.refuse[busy] = 1 << 30
	costs, err := r.Size(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c := costs[busy.Bucket]; c.Plannable() {
		t.Fatalf("the refused bucket is plannable: %+v", c)
	}
	for _, k := range []BucketKey{bk(4), bk(1)} {
		if c := costs[k]; !c.Plannable() {
			t.Fatalf("%v is not plannable: %+v", k, c)
		}
	}
}
