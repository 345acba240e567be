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
// log probabilities (5 alternatives) and penalties (repetition, presence,
// frequency, an 8-token logit bias, min_p, min_tokens) off and on, greedy
// and sampled at temperature 0.8, on stories260K and the synthetic 25M, in
// one run (each variant's fastest step over three alternating rounds, and
// the slowdown of "on" against "off"): go test -run '^$' -bench
// DecodeLogProbs -benchtime 1x ./engine
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
		m, _, err := llama.Open(dev, src, llama.Options{LogProbGraphs: true, PenaltyGraphs: true, DecodeBatchSizes: []int{64}, Prefill: llama.PrefillEager})
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
		variants := []struct {
			name string
			v    engine.BenchVariant
		}{
			{"plain", engine.BenchVariant{}},
			{"logprobs", engine.BenchVariant{LogProbs: true}},
			{"logprobs+penalties", engine.BenchVariant{LogProbs: true, Penalties: true}},
			{"sampled", engine.BenchVariant{Temperature: 0.8}},
			{"sampled+logprobs+penalties", engine.BenchVariant{LogProbs: true, Penalties: true, Temperature: 0.8}},
		}
		b.Run(name, func(b *testing.B) {
			// Rounds alternate the variants, and each keeps its fastest
			// step, so that load from elsewhere on the machine weighs on
			// every variant alike.
			best := make([]time.Duration, len(variants))
			for round := 0; round < 3; round++ {
				for i, v := range variants {
					r, err := e.BenchDecodeVariant(ctx, 64, 2, 10, 10*time.Second, v.v)
					if err != nil || !r.Replay {
						b.Fatalf("%s: %+v %v", v.name, r, err)
					}
					if best[i] == 0 || r.Min < best[i] {
						best[i] = r.Min
					}
				}
			}
			for i, v := range variants {
				b.ReportMetric(float64(best[i].Microseconds()), v.name+"-us/step")
			}
			b.ReportMetric(100*(float64(best[2])/float64(best[0])-1), "greedy-on-vs-off-%")
			b.ReportMetric(100*(float64(best[4])/float64(best[3])-1), "sampled-on-vs-off-%")
		})
		e.Close()
		cancel()
		m.Close()
		dev.Close()
	}
}
