package graph

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// Every buffer a capture reads is claimed before the first warm-up and the
// first capture: a build in between could move a buffer an earlier warm-up
// staged into or an earlier graph recorded. Counting the builds afterwards
// would not see a runner that built each spec's buffers lazily at its own
// warm-up; the fake's event log keeps the order. Covered for Capture, for
// sizing then Capture, and for the background path (WarmNext, CaptureBucket).
func TestGraphBuffersBuiltBeforeAnyWarmupOrCapture(t *testing.T) {
	for _, p := range capturePaths {
		t.Run(p.name, func(t *testing.T) {
			r, n := runPath(t, p.run)
			specs := r.Specs()
			if got := len(r.Buckets()); got != len(specs)/2 {
				t.Fatalf("registered %v, want all %d buckets", r.Buckets(), len(specs)/2)
			}
			n.mu.Lock()
			events := slices.Clone(n.events)
			built := slices.Clone(n.built)
			n.mu.Unlock()
			first := slices.IndexFunc(events, func(e string) bool { return !strings.HasPrefix(e, "build ") })
			if first < 0 {
				t.Fatalf("no warm-up or capture ran: %v", events)
			}
			if !strings.HasPrefix(events[first], "warm ") {
				t.Fatalf("the first forward on a capture lease was %q, want a warm-up", events[first])
			}
			if !slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "capture ") }) {
				t.Fatalf("no capture ran: %v", events)
			}
			for _, e := range events[first:] {
				if strings.HasPrefix(e, "build ") {
					t.Errorf("%q came after %q: every spec's buffers must be built before any warm-up or capture", e, events[first])
				}
			}
			// Every spec of the runner, each claimed once.
			want := make([]string, len(specs))
			for i, sp := range specs {
				want[i] = sp.String()
			}
			got := make([]string, len(built))
			for i, sp := range built {
				got[i] = sp.String()
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("built the buffers of %v, want every spec %v", got, want)
			}
		})
	}
}

// capturePaths are the three ways a runner gets its buckets captured:
// Capture alone (it sizes as it goes), sizing then Capture, and the engine's
// background path (WarmNext over every spec, then CaptureBucket per bucket).
// runPath runs a capture path on a two-slot runner of a decode config and a
// packed prefill one.
func runPath(t *testing.T, run func(*testing.T, *Runner)) (*Runner, *fakeNode) {
	t.Helper()
	n := newFakeNode(t, true)
	r := newRunner(t, n, []*Config{small(), {Walk: "prefill", Packed: &Packed{TokenLengths: []int{8, 4}}, BatchSizes: []int{2}}}, Options{})
	run(t, r)
	return r, n
}

var capturePaths = []struct {
	name string
	run  func(t *testing.T, r *Runner)
}{
	{"Capture", func(t *testing.T, r *Runner) {
		if err := r.Capture(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}},
	{"Size then Capture", func(t *testing.T, r *Runner) {
		if _, err := r.Size(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := r.Capture(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}},
	{"background", func(t *testing.T, r *Runner) {
		specs, err := r.Prepare()
		if err != nil {
			t.Fatal(err)
		}
		for _, more := r.WarmNext(); more; _, more = r.WarmNext() {
		}
		for _, sp := range specs {
			if sp.Slot == 0 {
				if err := r.CaptureBucket(sp.Bucket); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := r.ReleasePadding(); err != nil {
			t.Fatal(err)
		}
	}},
}
