package graph

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rewrite regenerates the golden traces in testdata instead of comparing
// with them: go test ./graph -run TestTraces -rewrite (and the engine's with
// go test ./engine -run TestStepTraces -rewrite).
var rewrite = flag.Bool("rewrite", false, "rewrite the golden traces in testdata")

// golden compares got with testdata/name, or writes it there with -rewrite:
// a change in the order of what the runner asks shows as a diff.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *rewrite {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -rewrite to make it)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
			i++
		}
		t.Errorf("%s differs from line %d:\ngot  %q\nwant %q\n(run with -rewrite if the change is meant)", path, i+1,
			gl[min(i, len(gl)-1)], wl[min(i, len(wl)-1)])
	}
}

// The fake node's event log on each capture path (a decode config and a
// packed prefill one, two slots), then a replay on every bucket: what the
// runner builds, warms and captures, in order.
func TestTraces(t *testing.T) {
	cfgs := func() []*Config {
		return []*Config{small(), {Walk: "prefill", Packed: &Packed{TokenLengths: []int{8, 4}}, BatchSizes: []int{2}}}
	}
	for _, p := range capturePaths {
		t.Run(p.name, func(t *testing.T) {
			n := newFakeNode(t, true)
			r := newRunner(t, n, cfgs(), Options{})
			p.run(t, r)
			n.mu.Lock()
			events := slices.Clone(n.events)
			n.mu.Unlock()
			var b strings.Builder
			fmt.Fprintf(&b, "# graph runner trace: %s (go test ./graph -run TestTraces -rewrite rewrites it)\n", p.name)
			for _, e := range events {
				b.WriteString(e + "\n")
			}
			for _, k := range r.Buckets() {
				fmt.Fprintf(&b, "live %v\n", k)
			}
			golden(t, "trace_"+strings.ReplaceAll(strings.ToLower(p.name), " ", "_")+".txt", b.String())
		})
	}
}
