package graph

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// errorLines are the ERROR lines of a text log that mention every one of
// words.
func errorLines(log string, words ...string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "level=ERROR") {
			continue
		}
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			out = append(out, line)
		}
	}
	return out
}

// A bucket whose replay differs from its eager run is dropped before it goes
// live, loudly; the other buckets still register. NoGoldenCheck registers it.
func TestGoldenCheckDropsDivergingBucket(t *testing.T) {
	bad := bk(2)
	// Slot 1 of bs=2 records one extra kernel while capturing, so its
	// replay gives a "y" the eager run did not.
	diverging := func(t *testing.T) *fakeNode {
		n := newFakeNode(t, true)
		n.fail[SlotSpec{Bucket: bad, Slot: 1}] = "diverge"
		return n
	}
	t.Run("capture", func(t *testing.T) {
		n := diverging(t)
		var logs bytes.Buffer
		r := newRunner(t, n, []*Config{small()}, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err := r.Capture(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		if got := r.Buckets(); !slices.Equal(got, []BucketKey{bk(4), bk(1)}) {
			t.Fatalf("registered %v, want bs=4 and bs=1 (bs=2's replay differs from eager)", got)
		}
		if r.lookupBucket(bad) != nil || r.SelectBucket("decode", 2, 2, "") == nil || r.SelectBucket("decode", 2, 2, "").Key != bk(4) {
			t.Fatal("the diverging bucket is leasable")
		}
		if got := r.droppedKeys(); !slices.Equal(got, []BucketKey{bad}) {
			t.Fatalf("dropped %v, want only %v", got, bad)
		}
		if lines := errorLines(logs.String(), "golden check", bad.String()); len(lines) == 0 {
			t.Fatalf("no ERROR line names the golden check and %v:\n%s", bad, logs.String())
		}
		// The drop left the stream and pool usable: bs=1 was captured after.
		if r.Stream().Capturing() {
			t.Fatal("stream left capturing")
		}
	})
	t.Run("background", func(t *testing.T) {
		n := diverging(t)
		var logs bytes.Buffer
		r := newRunner(t, n, []*Config{small()}, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if _, err := r.Prepare(); err != nil {
			t.Fatal(err)
		}
		for _, more := r.WarmNext(); more; _, more = r.WarmNext() {
		}
		for _, k := range []BucketKey{bk(4), bad, bk(1)} {
			err := r.CaptureBucket(k)
			if k == bad {
				if err == nil || !strings.Contains(err.Error(), "golden check") {
					t.Fatalf("CaptureBucket(%v) = %v, want a golden check failure", k, err)
				}
			} else if err != nil {
				t.Fatalf("CaptureBucket(%v): %v", k, err)
			}
		}
		if got := r.Buckets(); !slices.Equal(got, []BucketKey{bk(4), bk(1)}) {
			t.Fatalf("registered %v, want bs=4 and bs=1", got)
		}
		if lines := errorLines(logs.String(), "golden check", bad.String()); len(lines) == 0 {
			t.Fatalf("no ERROR line names the golden check and %v:\n%s", bad, logs.String())
		}
	})
	t.Run("sizing", func(t *testing.T) {
		// A throwaway capture is checked too: a bucket measured from a
		// diverging graph cannot be planned.
		n := diverging(t)
		n.fail = map[SlotSpec]string{{Bucket: bk(4)}: "diverge"}
		r := newRunner(t, n, []*Config{small()}, Options{})
		costs, err := r.Size(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if costs[bk(4)].Plannable() {
			t.Fatalf("bs=4 was measured from a graph whose replay differs from eager: %+v", costs[bk(4)])
		}
		if !costs[bk(2)].Plannable() || !costs[bk(1)].Plannable() {
			t.Fatalf("the other buckets: %+v %+v", costs[bk(2)], costs[bk(1)])
		}
	})
	t.Run("NoGoldenCheck", func(t *testing.T) {
		n := diverging(t)
		var logs bytes.Buffer
		r := newRunner(t, n, []*Config{small()}, Options{NoGoldenCheck: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err := r.Capture(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		if got := r.Buckets(); !slices.Equal(got, []BucketKey{bk(4), bk(2), bk(1)}) {
			t.Fatalf("registered %v, want every bucket without the golden check", got)
		}
		if len(r.droppedKeys()) != 0 || strings.Contains(logs.String(), "level=ERROR") {
			t.Fatalf("dropped %v:\n%s", r.droppedKeys(), logs.String())
		}
		// The fault is real: the unchecked slot replays a "y" of zeros where
		// the checked slot 0 replays the eager result.
		ys := make([][]float32, 2)
		for slot, s := range r.lookupBucket(bad).Slots {
			if err := s.exec.Launch(r.Stream()); err != nil {
				t.Fatal(err)
			}
			y, err := accel.DownloadF32(r.Stream(), s.Outputs()["y"])
			if err != nil {
				t.Fatal(err)
			}
			ys[slot] = y
		}
		if sameBits(ys[0], ys[1]) || slices.ContainsFunc(ys[1], func(v float32) bool { return v != 0 }) {
			t.Fatalf("slot 1 did not diverge: slot 0 %v, slot 1 %v", ys[0], ys[1])
		}
	})
}

func TestCompareBytes(t *testing.T) {
	f32 := func(v ...float32) []byte { return accel.F32Bytes(v) }
	i32 := func(v ...int32) []byte { return accel.I32Bytes(v) }
	nan := float32(math.NaN())
	otherNaN := math.Float32frombits(math.Float32bits(nan) ^ 1) // another payload
	inf := float32(math.Inf(1))
	const tol = 1e-3
	cases := []struct {
		name      string
		got, want []byte
		dt        accel.DType
		exact     bool
		ok        bool
		at        int // the first differing element when !ok
	}{
		{"equal exact", f32(1, -2, 3), f32(1, -2, 3), accel.F32, true, true, 0},
		{"equal tolerant", f32(1, -2, 3), f32(1, -2, 3), accel.F32, false, true, 0},
		{"empty", nil, nil, accel.F32, true, true, 0},
		{"one ulp exact", f32(1, 2, 3), f32(1, math.Nextafter32(2, 3), 3), accel.F32, true, false, 1},
		{"one ulp tolerant", f32(1, 2, 3), f32(1, math.Nextafter32(2, 3), 3), accel.F32, false, true, 0},
		{"within relative tolerance", f32(1000, 1), f32(1000.5, 1), accel.F32, false, true, 0},
		{"beyond relative tolerance", f32(1, 1000), f32(1, 1002), accel.F32, false, false, 1},
		{"within absolute tolerance near 0", f32(0, 5e-4), f32(0, 0), accel.F32, false, true, 0},
		{"beyond absolute tolerance near 0", f32(0, 0, 2e-3), f32(0, 0, 0), accel.F32, false, false, 2},
		{"sign flip", f32(1, 2), f32(1, -2), accel.F32, false, false, 1},
		{"NaN got, number wanted", f32(1, nan), f32(1, 2), accel.F32, false, false, 1},
		{"number got, NaN wanted", f32(1, 2), f32(1, nan), accel.F32, false, false, 1},
		{"NaN against number exact", f32(nan), f32(0), accel.F32, true, false, 0},
		{"NaN against NaN tolerant", f32(1, nan), f32(1, nan), accel.F32, false, true, 0},
		{"NaN against NaN exact", f32(1, nan), f32(1, nan), accel.F32, true, true, 0},
		{"NaN payloads differ tolerant", f32(otherNaN), f32(nan), accel.F32, false, true, 0},
		{"NaN payloads differ exact", f32(otherNaN), f32(nan), accel.F32, true, false, 0},
		{"Inf against Inf tolerant", f32(inf, -inf), f32(inf, -inf), accel.F32, false, true, 0},
		{"Inf against number tolerant", f32(1, inf), f32(1, 1), accel.F32, false, false, 1},
		{"number against Inf tolerant", f32(1, 1), f32(1, inf), accel.F32, false, false, 1},
		{"Inf against -Inf tolerant", f32(-inf), f32(inf), accel.F32, false, false, 0},
		{"shorter", f32(1, 2), f32(1, 2, 3), accel.F32, false, false, 0},
		{"longer", f32(1, 2, 3), f32(1, 2), accel.F32, true, false, 0},
		{"empty against one", nil, f32(0), accel.F32, false, false, 0},
		// Integers are compared exactly even where floats have a tolerance.
		{"I32 equal", i32(7, 8, 9), i32(7, 8, 9), accel.I32, false, true, 0},
		{"I32 off by one", i32(7, 8, 9), i32(7, 8, 10), accel.I32, false, false, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			at, ok := compareBytes(c.got, c.want, c.dt, c.exact, tol)
			if ok != c.ok || (!ok && at != c.at) {
				t.Fatalf("compareBytes = (%d, %v), want (%d, %v)", at, ok, c.at, c.ok)
			}
		})
	}
}
