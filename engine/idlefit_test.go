package engine_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// logCounter counts log records by message, and keeps the ERROR ones.
type logCounter struct {
	mu     sync.Mutex
	msgs   map[string]int
	errors []string
}

func (c *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *logCounter) WithGroup(string) slog.Handler            { return c }
func (c *logCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.msgs == nil {
		c.msgs = map[string]int{}
	}
	c.msgs[r.Message]++
	if r.Level >= slog.LevelError {
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		c.errors = append(c.errors, b.String())
	}
	return nil
}

func (c *logCounter) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.msgs[msg]
}

// A bucket whose padding rows cannot be admitted even on an idle engine (a KV
// cache of 5 pages besides the sink, a decode bucket of 8 rows, each needing
// a capture-time page) is left out once, with one ERROR line saying why; the
// idle loop does not retry it for ever. The buckets that fit still go live.
func TestBucketThatNeverFitsIsLeftOutOnce(t *testing.T) {
	logs := &logCounter{}
	dev := openCPU(t)
	m, _, err := llama.Open(dev, llama.Source{}, llama.Options{DecodeBatchSizes: []int{1, 4, 8}, PrefillLengths: []int{16}, PrefillBatchSizes: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	e, err := engine.New(dev, m, engine.Options{Graphs: true, BackgroundCapture: true, KVPages: 6, MaxBatch: 8,
		PlanCache: "off", Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	const deferred = "accelerator graph warm-up deferred: resources busy"
	deadline := time.Now().Add(2 * time.Minute)
	for logs.count("capture finished") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("background capture did not finish")
		}
		if n := logs.count(deferred); n > 20 {
			t.Fatalf("an idle engine deferred a warm-up %d times", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	logs.mu.Lock()
	errs := logs.errors
	logs.mu.Unlock()
	if len(errs) != 1 || !strings.Contains(errs[0], "decode[bs=8,") || !strings.Contains(errs[0], "idle") {
		t.Fatalf("want one ERROR line naming decode[bs=8] and saying it never fits when idle; got %q", errs)
	}
	live := map[string]bool{}
	for _, k := range e.Runner().Buckets() {
		live[k.String()] = true
	}
	for _, k := range []string{"decode[bs=1,", "decode[bs=4,"} {
		found := false
		for s := range live {
			found = found || strings.HasPrefix(s, k)
		}
		if !found {
			t.Errorf("bucket %s not live: %v", k, live)
		}
	}
}
