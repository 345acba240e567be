package graph

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// With RequireGraphs, Capture fails with one error naming every declared
// bucket that will not replay and why: a walk blocked by a resource that
// cannot be captured, a bucket the plan left out, a dropped capture (issue
// 19, item 3). Without it, the same buckets are listed by Unreplayed and
// Capture succeeds.
func TestRequireGraphsNamesEveryUnreplayedBucket(t *testing.T) {
	setup := func(t *testing.T, require bool) (*Runner, map[BucketKey]bool) {
		n := newFakeNode(t, false)
		n.blockedWalks = map[string][]string{"verify": {"recurrent"}}
		n.fail[SlotSpec{Bucket: BucketKey{Walk: "decode", BatchSize: 1, Tokens: 1}}] = "error"
		verify := &Config{Walk: "verify", Batched: &Batched{TokensPerRow: 2}, BatchSizes: []int{1, 2}}
		r := newRunner(t, n, []*Config{small(), verify}, Options{RequireGraphs: require})
		// The plan leaves decode bs=4 out.
		planned := map[BucketKey]bool{{Walk: "decode", BatchSize: 2, Tokens: 2}: true, {Walk: "decode", BatchSize: 1, Tokens: 1}: true}
		return r, planned
	}
	want := []string{
		"decode[bs=4,tokens=4,key=] (left out by the capture plan",
		"decode[bs=1,tokens=1,key=] (capture dropped: ",
		"verify[bs=2,tokens=4,key=] (its step uses resources that cannot be captured: recurrent)",
		"verify[bs=1,tokens=2,key=] (its step uses resources that cannot be captured: recurrent)",
	}
	t.Run("on", func(t *testing.T) {
		r, planned := setup(t, true)
		err := r.Capture(context.Background(), planned)
		if !errors.Is(err, ErrGraphsRequired) {
			t.Fatalf("Capture: %v, want ErrGraphsRequired", err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("the error does not name %q:\n%v", w, err)
			}
		}
		if !strings.Contains(err.Error(), "4 declared bucket(s) will not replay") {
			t.Errorf("the error does not count the 4 buckets: %v", err)
		}
	})
	t.Run("off", func(t *testing.T) {
		r, planned := setup(t, false)
		if err := r.Capture(context.Background(), planned); err != nil {
			t.Fatalf("with the switch off nothing fails: %v", err)
		}
		var got []string
		for _, u := range r.Unreplayed() {
			got = append(got, u.String())
		}
		if len(got) != len(want) {
			t.Fatalf("unreplayed %q, want %d", got, len(want))
		}
		for i, w := range want {
			if !strings.HasPrefix(got[i], "runner "+w) {
				t.Errorf("unreplayed[%d] = %q, want it to start %q", i, got[i], "runner "+w)
			}
		}
		if live := r.Buckets(); !slices.Equal(live, []BucketKey{{Walk: "decode", BatchSize: 2, Tokens: 2}}) {
			t.Errorf("live %v, want only decode bs=2", live)
		}
	})
}

// A background plan that leaves buckets out makes them unreplayed too
// (LeaveOut), and so does a bucket CaptureBucket drops; buckets captured or
// still to capture are not listed.
func TestLeaveOutAndBackgroundDrops(t *testing.T) {
	n := newFakeNode(t, false)
	r := newRunner(t, n, []*Config{small()}, Options{})
	if _, err := r.Prepare(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, more := r.WarmNext(); !more {
			break
		}
	}
	r.LeaveOut(map[BucketKey]bool{{Walk: "decode", BatchSize: 2, Tokens: 2}: true, {Walk: "decode", BatchSize: 1, Tokens: 1}: true},
		map[BucketKey]string{{Walk: "decode", BatchSize: 4, Tokens: 4}: "does not fit"})
	n.fail[SlotSpec{Bucket: BucketKey{Walk: "decode", BatchSize: 1, Tokens: 1}}] = "error"
	if err := r.CaptureBucket(BucketKey{Walk: "decode", BatchSize: 1, Tokens: 1}); err == nil {
		t.Fatal("a failing capture was not reported")
	}
	var got []string
	for _, u := range r.Unreplayed() {
		got = append(got, u.Bucket.String()+" "+u.Reason)
	}
	want := []string{"decode[bs=4,tokens=4,key=] left out by the capture plan: does not fit", "decode[bs=1,tokens=1,key=] capture dropped: "}
	if len(got) != 2 || got[0] != want[0] || !strings.HasPrefix(got[1], want[1]) {
		t.Fatalf("unreplayed %q, want %q", got, want)
	}
}
