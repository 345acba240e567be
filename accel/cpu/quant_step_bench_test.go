package cpu

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// shape110M is the synthetic 110M model's shape (llama2.c's stories110M).
var shape110M = modelShape{"110M", 768, 2048, 12, 12, 12, 32000}

// BenchmarkStep110MQuant times the batch-1 decode step of the 110M shape
// (context 64) with quantized weights and a Q6_K classifier, as in
// llama.cpp's Q8_0, Q4_0 and Q4_K files, eager and replayed, on one and on
// two threads: µs/step is the mean, min-µs/step the fastest step (steadier
// on a shared machine). `go test -bench StepQuant -run func BenchmarkStep110MQuant(b *testing.B) {X ./accel/cpu`
func BenchmarkStep110MQuant(b *testing.B) {
	for _, wdt := range []accel.DType{accel.Q8_0, accel.Q4_0, accel.Q4_K} {
		for _, th := range []int{1, 2} {
			for _, mode := range []string{"eager", "replay"} {
				b.Run(fmt.Sprintf("%s/%s/threads%d/%s", shape110M.name, wdt, th, mode), func(b *testing.B) {
					e := acceltest.Open(b, "cpu", accel.Options{Threads: th})
					d := newDecoder(b, e, shape110M, wdt, 1, 1, 64)
					var ex accel.Exec
					step := func() {
						if ex != nil {
							d.replay(b, ex)
						} else {
							d.eager(b)
						}
					}
					if mode == "replay" {
						ex = d.capture(b)
					}
					step()
					times := make([]time.Duration, 0, b.N)
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						t0 := time.Now()
						step()
						times = append(times, time.Since(t0))
					}
					b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)*1e6, "µs/step")
					b.ReportMetric(float64(slices.Min(times).Nanoseconds())/1e3, "min-µs/step")
				})
			}
		}
	}
}

// BenchmarkStepChunks compares, in one process and step by step
// alternately (so that both see the same load on a shared machine), the
// replayed batch-1 step of the 110M shape (Q4_K, Q6_K classifier: about 70
// MB of weights a step, more than the L3) on two threads with its matmul
// pieces cut into chunks the other worker may take (chunkBytes) and whole
// (one half per worker): min and median µs/step of each.
// `GOEXPERIMENT=simd go test -run '^$' -bench StepChunks -benchtime 100x ./accel/cpu`
func BenchmarkStepChunks(b *testing.B) {
	e := acceltest.Open(b, "cpu", accel.Options{Threads: 2})
	d := newDecoder(b, e, shape110M, accel.Q4_K, 1, 1, 64)
	chunked := d.capture(b)
	old := chunkBytes
	chunkBytes = 1 << 60
	whole := d.capture(b)
	chunkBytes = old
	exs := []accel.Exec{whole, chunked}
	names := []string{"whole", "chunked"}
	if os.Getenv("SWAP") != "" {
		exs, names = []accel.Exec{chunked, whole}, []string{"chunked", "whole"}
	}
	times := [2][]time.Duration{}
	for _, ex := range exs {
		d.replay(b, ex)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for v, ex := range exs {
			t0 := time.Now()
			d.replay(b, ex)
			times[v] = append(times[v], time.Since(t0))
		}
	}
	for v, name := range names {
		slices.Sort(times[v])
		b.ReportMetric(float64(times[v][0].Nanoseconds())/1e3, name+"-min-µs/step")
		b.ReportMetric(float64(times[v][len(times[v])/2].Nanoseconds())/1e3, name+"-med-µs/step")
	}
}
