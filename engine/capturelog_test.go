package engine_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// recordHandler keeps the records logged through it.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// Start-up capture ends with one summary line: buckets live, time, memory.
func TestCaptureFinishedLine(t *testing.T) {
	h := &recordHandler{}
	s := start(t, true, engine.Options{Logger: slog.New(h)},
		llama.Options{PrefillLengths: []int{16}, PrefillBatchSizes: []int{1}, DecodeBatchSizes: []int{1, 2}})
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Message != "capture finished" {
			continue
		}
		n++
		attrs := map[string]slog.Value{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
		if live := attrs["buckets_live"]; live.Kind() != slog.KindInt64 || live.Int64() != int64(s.e.LiveBuckets()) || live.Int64() == 0 {
			t.Errorf("buckets_live %v, engine has %d", live, s.e.LiveBuckets())
		}
		if mem := attrs["graph_memory"]; mem.Kind() != slog.KindInt64 || mem.Int64() <= 0 {
			t.Errorf("graph_memory %v", mem)
		}
		if _, ok := attrs["seconds"]; !ok {
			t.Error("no seconds")
		}
	}
	if n != 1 {
		t.Errorf("%d \"capture finished\" lines, want 1", n)
	}
}
