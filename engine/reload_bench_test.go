package engine_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// BenchmarkReload measures new weights of the same shapes taken in place
// (Engine.Reload: every graph slot recorded again and its executable
// updated) against capturing them again (a new engine's Start, timed alone, with planning
// off: warm-ups, captures, instantiations and golden checks), on stories260K
// with decode buckets 1, 2, 4 and prefill regions of 16 and 32 tokens for 1
// and 4 prompts. docs/SERVING.md has the figures.
func BenchmarkReload(b *testing.B) {
	opts := llama.Options{PrefillLengths: []int{16, 32}, PrefillBatchSizes: []int{1, 4}, DecodeBatchSizes: []int{1, 2, 4}}
	b.Run("update", func(b *testing.B) {
		dev := openCPU(b)
		ms := []*llama.Model{reloadModel(b, dev, 1, opts), reloadModel(b, dev, 1.25, opts)}
		for _, m := range ms {
			defer m.Close()
		}
		e, err := engine.New(dev, ms[0], engine.Options{Graphs: true, PlanCache: "off", NoPlan: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		if err := e.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := range b.N {
			if _, err := e.Reload(context.Background(), ms[(i+1)%2]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("recapture", func(b *testing.B) {
		dev := openCPU(b)
		m := reloadModel(b, dev, 1.25, opts)
		defer m.Close()
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			e, err := engine.New(dev, m, engine.Options{Graphs: true, PlanCache: "off", NoPlan: true, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := e.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			e.Close()
			b.StartTimer()
		}
	})
}
