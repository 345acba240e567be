package cpu

import (
	"fmt"
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

// BenchmarkStep110MBatch64 times the replayed decode step of the 110M
// shape at batch 64 (64 sequences, context 32: llama-batched-bench's 64
// sequences of a 4-token prompt decoding 32 tokens average 20) with
// quantized weights and a Q6_K classifier, on one thread: cpu-ms/step is
// the CPU time per step, steadier than the wall time on a shared machine.
// `GOEXPERIMENT=simd go test -run XXX -bench Step110MBatch64 ./accel/cpu`
func BenchmarkStep110MBatch64(b *testing.B) {
	for _, wdt := range []accel.DType{accel.Q8_0, accel.Q4_0, accel.Q4_K} {
		b.Run(fmt.Sprintf("%s/%s", shape110M.name, wdt), func(b *testing.B) {
			e := acceltest.Open(b, "cpu", accel.Options{Threads: 1})
			d := newDecoder(b, e, shape110M, wdt, 64, 64, 32)
			ex := d.capture(b)
			d.replay(b, ex)
			b.ResetTimer()
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				d.replay(b, ex)
			}
			reportCPUPerStep(b, cpu0)
			b.ReportMetric(float64(d.R)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// BenchmarkStep110MWork times the work of the replayed batch-1 step's
// two-worker schedule run by one goroutine (it claims both workers' slots
// in turn, as when the other worker is descheduled), so that the figure is
// the schedule's own work, each worker's share of it included (a matmul's
// quantization of x is made by both), with no wait at a barrier: cpu-ms/step
// is the process CPU time per step, steadier than any wall time on a shared
// machine. `GOEXPERIMENT=simd go test -run XXX -bench Step110MWork ./accel/cpu`
func BenchmarkStep110MWork(b *testing.B) {
	for _, wdt := range []accel.DType{accel.Q8_0, accel.Q4_0, accel.Q4_K} {
		b.Run(fmt.Sprintf("%s/%s", shape110M.name, wdt), func(b *testing.B) {
			e := acceltest.Open(b, "cpu", accel.Options{Threads: 2})
			d := newDecoder(b, e, shape110M, wdt, 1, 1, 64)
			ex := d.capture(b)
			d.replay(b, ex) // packs the weights
			s := ex.(*exec).cur.Load().sched
			if s == nil {
				b.Fatal("no schedule on two threads")
			}
			dev := e.Dev.(*Device)
			k := &kctx{d: dev}
			runAlone(dev, s, k)
			b.ResetTimer()
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				runAlone(dev, s, k)
			}
			reportCPUPerStep(b, cpu0)
		})
	}
}

// reportCPUPerStep reports the process CPU time since cpu0 per iteration as
// cpu-ms/step.
func reportCPUPerStep(b *testing.B, cpu0 time.Duration) {
	if c := processCPU() - cpu0; c > 0 {
		b.ReportMetric(c.Seconds()/float64(b.N)*1e3, "cpu-ms/step")
	}
}
