package engine_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
	"github.com/reprise-ml/reprise/model/llama"

	goldenfile "github.com/reprise-ml/reprise/internal/golden"
)

// rewrite regenerates the golden step traces in testdata: go test ./engine
// -run TestStepTraces -rewrite.
var rewrite = flag.Bool("rewrite", false, "rewrite the golden traces in testdata")

// traceLog collects a trace's lines from the loop and the capture callback.
type traceLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *traceLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *traceLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n") + "\n"
}

// The engine's step sequences as golden traces (testdata/steps_*.txt): the
// order buckets are captured in, in the foreground and the background, and
// the steps that serve a fixed set of requests submitted together, with
// their mode (eager, replayed on which bucket and slot, pre-planned), under
// backpressure too. A change in any order shows as a diff.
func TestStepTraces(t *testing.T) {
	mo := llama.Options{DecodeBatchSizes: []int{1, 2, 4}, PrefillLengths: []int{16}, PrefillBatchSizes: []int{1, 2}}
	for _, c := range []struct {
		name string
		eo   engine.Options
		reqs int
	}{
		{"capture_and_serve", engine.Options{Graphs: true}, 3},
		{"background", engine.Options{Graphs: true, BackgroundCapture: true}, 3},
		// Three pages besides the sink, one a request: three run at once.
		{"backpressure", engine.Options{Graphs: true, KVPages: 4}, 6},
		{"eager", engine.Options{}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := &traceLog{}
			tr.add(fmt.Sprintf("# engine step trace: %s (go test ./engine -run TestStepTraces -rewrite rewrites it)", c.name))
			logs := &logCounter{}
			dev := openCPU(t)
			m, _, err := llama.Open(dev, llama.Source{}, mo)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.Close)
			eo := c.eo
			eo.PlanCache, eo.MaxBatch, eo.Logger = "off", 4, slog.New(logs)
			eo.Runner.Progress = func(done, total int, spec graph.SlotSpec, err error) {
				tr.add(fmt.Sprintf("capture %v err=%v", spec, err))
			}
			e, err := engine.New(dev, m, eo)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.Close)
			e.TraceSteps(tr.add)
			if err := e.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if c.eo.BackgroundCapture {
				deadline := time.Now().Add(time.Minute)
				for logs.count("capture finished") == 0 {
					if time.Now().After(deadline) {
						t.Fatal("background capture did not finish")
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			var reqs []engine.Request
			for i := range c.reqs {
				reqs = append(reqs, engine.Request{Prompt: []int32{1, int32(100 + i), int32(200 + i)}, MaxTokens: 3 + i%2})
			}
			for i, h := range submitOnLoop(t, e, reqs) {
				if _, err := drain(h); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			golden(t, "steps_"+c.name+".txt", tr.String())
		})
	}
}

// golden compares got with testdata/name, or writes it there with -rewrite.
func golden(t *testing.T, name, got string) {
	t.Helper()
	goldenfile.Check(t, filepath.Join("testdata", name), got, *rewrite)
}
