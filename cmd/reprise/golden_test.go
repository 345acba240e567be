package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/graph"
)

var update = flag.Bool("update", false, "rewrite the golden files of cmd/reprise's output tests")

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s:\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// plan's table stays aligned however long a bucket's name is.
func TestPlanTable(t *testing.T) {
	out := planOutput{Model: "m", Device: "cpu:0 (test)", Budget: 64 << 20, Floor: 3 << 20, Predicted: 8 << 20, PredictedPool: 6 << 20,
		Buckets: []planBucket{
			{CaptureCost: graph.CaptureCost{Peak: 170 << 10, Graph: 2 << 20, Outside: 2 << 20, Executable: 41 << 10, Slots: 2},
				Name: "decode[bs=64,tokens=64,key=]", Chosen: true},
			{CaptureCost: graph.CaptureCost{Peak: 1 << 20, Graph: -1, Outside: 2 << 20, Executable: 39 << 10, Slots: 2},
				Name: "prefill.blocks[bs=8,tokens=512,key=lm_head.last_rows]", Why: "over the budget"},
		}}
	var b strings.Builder
	printPlan(&b, out)
	golden(t, "plan_table.golden", b.String())
	lines := strings.Split(b.String(), "\n")
	col := strings.Index(lines[2], "peak") + len("peak")
	for _, l := range lines[3:5] {
		if len(l) < col || l[col-1] != 'B' && l[col-1] != '-' || l[col] != ' ' {
			t.Errorf("peak column not aligned at %d: %q", col, l)
		}
	}
}

// bench counts buckets in English, does not call weights read from the
// cache a broken roofline, and lists its bandwidth probes where it took
// several.
func TestBenchText(t *testing.T) {
	rep := BenchReport{Model: "synthetic-6M", Params: 6_000_000, WeightBytes: 24 << 20, ReadBytes: 24 << 20, Weights: "f32", Device: "cpu:0 (test)",
		MemoryBandwidth: 20e9, Capture: BenchCapture{Seconds: 1.5, Buckets: 1},
		Rows:     []BenchRow{{BatchSize: 1, EagerStep: 2e6, ReplayStep: 1e6, Ratio: 2, EagerTokens: 500, ReplayTokens: 1000, GFLOPs: 12}},
		Roofline: &BenchRoof{WeightBytesPerS: 25e9, Fraction: 1.25, LastLevelCache: 32 << 20}}
	var b strings.Builder
	printBench(&b, rep)
	rep.Capture.Buckets, rep.Roofline.LastLevelCache, rep.ReadBytes = 3, 16<<20, 24<<20
	rep.MemoryBandwidth, rep.MemoryProbes = 0, nil
	rep.addProbe(15.5e9)
	rep.addProbe(20e9)
	rep.addProbe(18e9)
	if rep.MemoryBandwidth != 20e9 {
		t.Errorf("bandwidth %g after probes 15.5e9, 20e9, 18e9: want the best", rep.MemoryBandwidth)
	}
	printBench(&b, rep)
	if !strings.Contains(b.String(), "memory read bandwidth: 20.0 GB/s (best of 15.5, 20.0, 18.0)") {
		t.Error("the bandwidth probes are not listed")
	}
	golden(t, "bench_text.golden", b.String())
	if strings.Contains(b.String(), "1 buckets") {
		t.Error("1 buckets")
	}
}
