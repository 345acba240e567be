package graph

import (
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	goldenfile "github.com/reprise-ml/reprise/internal/golden"
)

// rewrite regenerates the golden traces in testdata instead of comparing
// with them: go test ./graph -run TestTraces -rewrite (and the engine's with
// go test ./engine -run TestStepTraces -rewrite).
var rewrite = flag.Bool("rewrite", false, "rewrite the golden traces in testdata")

// golden compares got with testdata/name, or writes it there with -rewrite.
func golden(t *testing.T, name, got string) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got, *rewrite)
}

// The fake node's event log on each capture path (a decode config and a
// packed prefill one, two slots), then the buckets live: what the runner
// builds, warms and captures, in order.
func TestTraces(t *testing.T) {
	for _, p := range capturePaths {
		t.Run(p.name, func(t *testing.T) {
			r, n := runPath(t, p.run)
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
