package cpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// BenchmarkSamplingOps times, eagerly on one thread, the sampling ops a
// decode step of 64 rows runs at the end, over the vocabularies of
// stories260K (512) and 25M (32000): the penalty pass (every row with a
// pool row; with min_p at temperature 0.8), the log probabilities with the
// top 20, the token count, and sampling greedy and at temperature 0.8.
// Against BenchmarkStep's replayed step of the same shape it is what the
// penalties and log probabilities add: go test -run '^$' -bench
// SamplingOps ./accel/cpu
func BenchmarkSamplingOps(b *testing.B) {
	for _, v := range []int{512, 32000} {
		e := acceltest.Open(b, "cpu", accel.Options{Threads: 1})
		const R = 64
		r := rand.New(rand.NewPCG(5, 6))
		lv := acceltest.Rand(r, R*v, 2)
		counts, bias := make([]int32, R*v), make([]float32, R*v)
		rows, params, temp := make([]int32, 2*R), make([]float32, 4*R), make([]float32, R)
		for i := range R {
			rows[2*i] = int32(i)
			params[4*i], params[4*i+1], params[4*i+2] = 1.1, 0.3, 0.2
			for k := range 8 {
				bias[i*v+(i*8+k)%v] = float32(k) - 4
				counts[i*v+r.IntN(v)] = accel.PenaltyPromptBit | int32(r.IntN(2))
			}
		}
		p := accel.PenaltyParams{Counts: e.I32(counts, R, v), Bias: e.F32(bias, R, v), Rows: e.I32(rows, R, 2),
			Params: e.F32(params, R, 4), Temperature: e.F32(temp, 1, R)}
		pm := p
		for i := range R {
			params[4*i+3], temp[i] = 0.05, 0.8
		}
		pm.Params, pm.Temperature = e.F32(params, R, 4), e.F32(temp, 1, R)
		// The same rows without a logit bias: a zero pool bias, and their
		// flags saying so (accel.PenaltyNoBias), or not.
		nb := p
		nb.Bias = e.Zeros(accel.F32, R, v)
		nbf := nb
		flagged := slices.Clone(rows)
		for i := range R {
			flagged[2*i+1] |= accel.PenaltyNoBias
		}
		nbf.Rows = e.I32(flagged, R, 2)
		logits, proc := e.F32(lv, R, v), e.Zeros(accel.F32, R, v)
		next := e.Zeros(accel.I32, 1, R)
		vals, ids := e.Zeros(accel.F32, R, 21), e.Zeros(accel.I32, R, 20)
		zeros := make([]int32, R)
		ones := make([]float32, R)
		for i := range ones {
			ones[i] = 1
		}
		greedy := accel.SampleParams{Temperature: e.F32(make([]float32, R), 1, R), TopK: e.I32(zeros, 1, R),
			TopP: e.F32(ones, 1, R), Seed: e.I32(make([]int32, 2*R), R, 2), Offset: e.I32(zeros, 1, R)}
		sampled := greedy
		sampled.Temperature = pm.Temperature
		ops := []struct {
			name string
			run  func(l *accel.Launcher)
		}{
			{"penalize", func(l *accel.Launcher) { l.Penalize(proc, logits, p) }},
			{"penalize+min_p", func(l *accel.Launcher) { l.Penalize(proc, logits, pm) }},
			{"penalize-nobias", func(l *accel.Launcher) { l.Penalize(proc, logits, nb) }},
			{"penalize-nobias-flagged", func(l *accel.Launcher) { l.Penalize(proc, logits, nbf) }},
			{"logprobs", func(l *accel.Launcher) { l.LogProbs(vals, ids, logits, next, 20) }},
			{"count", func(l *accel.Launcher) { l.CountTokens(p.Counts, p.Rows, next) }},
			{"sample-greedy", func(l *accel.Launcher) { l.Sample(next, logits, greedy) }},
			{"sample-t0.8", func(l *accel.Launcher) { l.Sample(next, logits, sampled) }},
		}
		for _, op := range ops {
			b.Run(fmt.Sprintf("V%d/%s", v, op.name), func(b *testing.B) {
				for b.Loop() {
					l := accel.On(e.S)
					op.run(l)
					if err := l.Err(); err != nil {
						b.Fatal(err)
					}
					if err := e.S.Synchronize(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/op")
			})
		}
	}
}
