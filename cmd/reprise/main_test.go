package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsage(t *testing.T) {
	if code, out, _ := runCLI(t, "help"); code != 0 || !strings.Contains(out, "generate") {
		t.Fatalf("help: %d %q", code, out)
	}
	if code, _, errs := runCLI(t, "frobnicate"); code != 2 || !strings.Contains(errs, "unknown command") {
		t.Fatalf("unknown command: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, "generate", "--steps", "-4"); code != 2 || !strings.Contains(errs, "--steps") {
		t.Fatalf("bad flag value: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, "generate", "--weights", "f16"); code != 2 || !strings.Contains(errs, "--weights") {
		t.Fatalf("bad weights: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, "generate", "--device", "nosuch"); code != 1 || !strings.Contains(errs, "unknown backend") {
		t.Fatalf("unknown device: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, "generate", "--model", "/nonexistent.bin", "--tokenizer", "/nonexistent.tok"); code != 1 || !strings.Contains(errs, "nonexistent") {
		t.Fatalf("missing model file: %d %q", code, errs)
	}
}

func TestDevices(t *testing.T) {
	code, out, _ := runCLI(t, "devices", "--json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var reports []deviceReport
	if err := json.Unmarshal([]byte(out), &reports); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range reports {
		if r.Backend == "cpu" && r.Available && len(r.Capability) == 1 && r.Capability[0].GraphCapture {
			found = true
		}
	}
	if !found {
		t.Fatalf("no usable cpu device in %s", out)
	}
}

func TestGenerateMatchesReference(t *testing.T) {
	want, err := os.ReadFile("../../model/stories260k/testdata/The_little_dog.txt")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("REPRISE_PLAN_CACHE", "off")
	for _, g := range []string{"on", "off"} {
		code, out, errs := runCLI(t, "generate", "--prompt", "The little dog", "--graphs", g, "--device-memory", "512MiB")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		if out != string(want) {
			t.Fatalf("graphs %s:\ngot  %q\nwant %q", g, out, want)
		}
	}
}

// plan --capture predicts the memory capture takes, pools and outside them,
// within 1% (on stories260K; on the synthetic 25M with REPRISE_PLAN_25M=1,
// about ten minutes on two loaded cores).
func TestPlanJSON(t *testing.T) {
	models := [][]string{{}}
	if os.Getenv("REPRISE_PLAN_25M") == "1" {
		models = append(models, []string{"--synthetic", "25M"})
	}
	for _, m := range models {
		args := append([]string{"plan", "--json", "--plan-cache", "off", "--capture", "--device-memory", "512MiB"}, m...)
		code, out, errs := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var p planOutput
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Buckets) == 0 || p.Floor <= 0 || p.Predicted <= 0 || p.ActualPool != p.PredictedPool {
			t.Fatalf("%s: plan %+v", p.Model, p)
		}
		if d := math.Abs(float64(p.Predicted - p.Actual)); d > 0.01*float64(p.Actual) {
			t.Errorf("%s: predicted %d bytes, capture took %d: %.1f%% off", p.Model, p.Predicted, p.Actual, 100*d/float64(p.Actual))
		}
	}
}

func TestBenchJSON(t *testing.T) {
	code, out, errs := runCLI(t, "bench", "--json", "--batch-sizes", "1,2", "--steps", "3", "--warmup", "1",
		"--prefill-lengths", "16", "--prefill-runs", "1", "--device-memory", "512MiB")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r BenchReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Rows) != 2 || r.Rows[0].ReplayStep <= 0 || r.Rows[1].EagerStep <= 0 || len(r.Prefill) != 1 || r.Prefill[0].Piecewise <= 0 {
		t.Fatalf("bench %s", out)
	}
	// The decode rate is 2 × parameters × batch over the faster step.
	for _, row := range r.Rows {
		best := row.EagerStep
		if row.ReplayStep > 0 {
			best = min(best, row.ReplayStep)
		}
		want := 2 * float64(r.Params) * float64(row.BatchSize) / float64(best)
		if row.GFLOPs <= 0 || math.Abs(row.GFLOPs-want) > 1e-9*want {
			t.Errorf("batch %d: effective_gflops %v, want %v", row.BatchSize, row.GFLOPs, want)
		}
	}
}

// Weights quantized at load (q4_0: the matrices whose rows are whole
// blocks, the classifier as Q8_0, the rest float32) give the same text with
// graphs on and off: replay equals eager on the CPU device. A context of 64
// positions (the 64 steps) leaves the prefill buckets of 128 and 256 tokens
// out, which cost most of the test's -race time and nothing it checks.
func TestGenerateQuantizedGraphsOnOff(t *testing.T) {
	t.Setenv("REPRISE_PLAN_CACHE", "off")
	var texts []string
	for _, g := range []string{"on", "off"} {
		code, out, errs := runCLI(t, "generate", "--prompt", "The little dog", "--weights", "q4_0", "--steps", "64",
			"--max-model-len", "64", "--graphs", g, "--device-memory", "512MiB")
		if code != 0 {
			t.Fatalf("graphs %s: exit %d: %s", g, code, errs)
		}
		texts = append(texts, out)
	}
	if texts[0] != texts[1] || !strings.HasPrefix(texts[0], "The little dog") {
		t.Errorf("graphs on %q, off %q", texts[0], texts[1])
	}
}
