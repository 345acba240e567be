package engine_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// BenchmarkDecodeLogProbs times the replayed decode step at batch 64 with
// log probabilities (5 alternatives) and penalties (repetition, presence,
// frequency, an 8-token logit bias, min_p, min_tokens) off and on, greedy
// and sampled at temperature 0.8, on stories260K and the synthetic 25M (a
// sub-benchmark each, which builds its model only when it runs), and
// reports the slowdown of "on" against "off" (overhead-%) in one run.
//
// The variants' request sets are open together and their steps
// alternate (Engine.BenchDecodeRounds: rounds of a few steps of each), so
// that load from elsewhere on the machine weighs alike on the steps
// compared; the slowdown is the median over rounds of each round's
// fastest "on" step against its fastest "off" step, in wall time and in
// process CPU time (-cpu-). The -us/step figures are each variant's
// median step, -min-us/step its fastest. With REPRISE_CPU_THREADS=1 no kernel worker waits on
// another, so the CPU time is the steps' work:
//
//	GOEXPERIMENT=simd go test -run '^$' -bench DecodeLogProbs -benchtime 1x ./engine
func BenchmarkDecodeLogProbs(b *testing.B) {
	for _, name := range []string{"stories260K", "25M"} {
		b.Run(name, func(b *testing.B) { benchDecodeLogProbs(b, name) })
	}
}

func benchDecodeLogProbs(b *testing.B, name string) {
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 4 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	src := llama.Source{}
	if name != "stories260K" {
		src.Synthetic = name
	}
	m, _, err := llama.Open(dev, src, llama.Options{LogProbGraphs: true, PenaltyGraphs: true, DecodeBatchSizes: []int{64}, Prefill: llama.PrefillEager})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, err := engine.New(dev, m, engine.Options{Graphs: true, PlanCache: "off", MaxBatch: 64,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	if err := e.Start(ctx); err != nil {
		b.Fatal(err)
	}
	// Each episode opens fresh request sets, so that every step compared
	// is at one of the first 16 positions (the attention's cost grows
	// with them, and would dilute what is measured): 8 episodes of 4
	// rounds of 3 steps after 2 of warm-up. A stories260K step at batch 64
	// is about a millisecond, a 25M one about 100 times longer: one
	// episode of 5 rounds of a step, after one.
	episodes, warmup, rounds, steps := 8, 2, 4, 3
	if name != "stories260K" {
		episodes, warmup, rounds, steps = 1, 1, 5, 1
	}
	// Each group is one BenchDecodeRounds per episode (at most one set with
	// penalties: the engine has 64 penalty rows); the first of a group is
	// "off", the second "on".
	type variant struct {
		name string
		v    engine.BenchVariant
	}
	groups := []struct {
		name string
		vs   []variant
	}{
		{"greedy", []variant{
			{"plain", engine.BenchVariant{}},
			{"logprobs+penalties", engine.BenchVariant{LogProbs: true, Penalties: true}},
			{"logprobs", engine.BenchVariant{LogProbs: true}},
		}},
		{"sampled", []variant{
			{"sampled", engine.BenchVariant{Temperature: 0.8}},
			{"sampled+logprobs+penalties", engine.BenchVariant{LogProbs: true, Penalties: true, Temperature: 0.8}},
		}},
	}
	b.ResetTimer()
	for _, g := range groups {
		vs := make([]engine.BenchVariant, len(g.vs))
		for i, v := range g.vs {
			vs[i] = v.v
		}
		all := make([]engine.DecodeSteps, len(vs))
		for range episodes {
			res, err := e.BenchDecodeRounds(ctx, 64, warmup, rounds, steps, vs)
			if err != nil {
				b.Fatalf("%s: %v", g.name, err)
			}
			for i, r := range res {
				if !r.Replay {
					b.Fatalf("%s: not replayed", g.vs[i].name)
				}
				all[i].Wall, all[i].CPU = append(all[i].Wall, r.Wall...), append(all[i].CPU, r.CPU...)
			}
		}
		for i, r := range all {
			b.ReportMetric(float64(median(r.Wall).Microseconds()), g.vs[i].name+"-us/step")
			b.ReportMetric(float64(slices.Min(r.Wall).Microseconds()), g.vs[i].name+"-min-us/step")
		}
		b.ReportMetric(roundsSlowdown(all[1].Wall, all[0].Wall, steps), g.name+"-overhead-%")
		if all[0].CPU[0] > 0 {
			b.ReportMetric(roundsSlowdown(all[1].CPU, all[0].CPU, steps), g.name+"-cpu-overhead-%")
		}
	}
}

// roundsSlowdown is the median over rounds (steps steps each) of how much
// slower, in %, the fastest step of on was than the fastest of off.
func roundsSlowdown(on, off []time.Duration, steps int) float64 {
	var r []float64
	for i := 0; i+steps <= len(on) && i+steps <= len(off); i += steps {
		r = append(r, 100*(float64(slices.Min(on[i:i+steps]))/float64(slices.Min(off[i:i+steps]))-1))
	}
	slices.Sort(r)
	if len(r) == 0 {
		return 0
	}
	if len(r)%2 == 0 {
		return (r[len(r)/2-1] + r[len(r)/2]) / 2
	}
	return r[len(r)/2]
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
