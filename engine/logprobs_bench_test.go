package engine_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// BenchmarkDecodeLogProbs times the replayed decode step at batch 64 with
// log probabilities (5 alternatives) off and on, on stories260K and the
// synthetic 25M, in one run: go test -run '^$' -bench DecodeLogProbs ./engine
func BenchmarkDecodeLogProbs(b *testing.B) {
	for _, name := range []string{"stories260K", "25M"} {
		dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 4 << 30})
		if err != nil {
			b.Fatal(err)
		}
		src := llama.Source{}
		if name != "stories260K" {
			src.Synthetic = name
		}
		m, _, err := llama.Open(dev, src, llama.Options{LogProbGraphs: true, DecodeBatchSizes: []int{64}, Prefill: llama.PrefillEager})
		if err != nil {
			b.Fatal(err)
		}
		e, err := engine.New(dev, m, engine.Options{Graphs: true, PlanCache: "off", MaxBatch: 64,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := e.Start(ctx); err != nil {
			b.Fatal(err)
		}
		for _, lp := range []bool{false, true} {
			b.Run(name+map[bool]string{false: "/plain", true: "/logprobs"}[lp], func(b *testing.B) {
				var r engine.DecodeBench
				var err error
				if lp {
					r, err = e.BenchDecodeLogProbs(ctx, 64, 3, 20, 20*time.Second)
				} else {
					r, err = e.BenchDecode(ctx, 64, 3, 20, 20*time.Second, false)
				}
				if err != nil || !r.Replay {
					b.Fatalf("%+v %v", r, err)
				}
				b.ReportMetric(float64(r.Median.Microseconds()), "us/step")
			})
		}
		e.Close()
		cancel()
		m.Close()
		dev.Close()
	}
}
