package cpu

import (
	"fmt"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// BenchmarkStep times one decode step (T = R = bs, context 64) of the
// stories260K and 25M shapes, launched eagerly (kernel by kernel, fork/join)
// and replayed (static schedule), reporting µs/step, tokens/s and, for the
// matmuls, GFLOP/s. `go test -bench Step -run XXX ./accel/cpu`
func BenchmarkStep(b *testing.B) {
	for _, sh := range []modelShape{shapeStories, shape25M} {
		for _, wdt := range []accel.DType{accel.F32, accel.BF16} {
			for _, bs := range []int{1, 8, 16, 32, 64} {
				for _, mode := range []string{"eager", "replay"} {
					b.Run(fmt.Sprintf("%s/%s/bs%d/%s", sh.name, wdt, bs, mode), func(b *testing.B) {
						e := acceltest.Open(b, "cpu", accel.Options{})
						d := newDecoder(b, e, sh, wdt, bs, bs, 64)
						benchSteps(b, d, mode)
					})
				}
			}
		}
	}
}

// BenchmarkPrefill times a 512-token prefill step of the 25M shape (its
// matmuls are 512x512x512 and 512x1376x512).
func BenchmarkPrefill(b *testing.B) {
	for _, wdt := range []accel.DType{accel.F32, accel.BF16} {
		for _, mode := range []string{"eager", "replay"} {
			b.Run(fmt.Sprintf("25M/%s/T512/%s", wdt, mode), func(b *testing.B) {
				e := acceltest.Open(b, "cpu", accel.Options{})
				d := newDecoder(b, e, shape25M, wdt, 512, 1, 512)
				benchSteps(b, d, mode)
			})
		}
	}
}

func benchSteps(b *testing.B, d *decoder, mode string) {
	var ex accel.Exec
	if mode == "replay" {
		ex = d.capture(b)
		d.replay(b, ex)
	} else {
		d.eager(b)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if ex != nil {
			d.replay(b, ex)
		} else {
			d.eager(b)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(sec*1e6, "µs/step")
	b.ReportMetric(float64(d.R)/sec, "tok/s")
	b.ReportMetric(d.flops()/sec/1e9, "GFLOP/s")
	b.ReportMetric(float64(d.wbytes)/sec/1e9, "wGB/s")
}

// BenchmarkRoofline: the 25M model's batch-1 replayed decode step against
// the memory read bandwidth measured in the same run with the vector sum
// (ReadBandwidth), as the bench's roofline but with a bandwidth figure that
// is not bound by scalar adds: reports the weights' read rate, the
// bandwidth and the fraction.
func BenchmarkRoofline(b *testing.B) {
	for _, wdt := range []accel.DType{accel.F32, accel.BF16} {
		b.Run(wdt.String(), func(b *testing.B) {
			e := acceltest.Open(b, "cpu", accel.Options{})
			d := newDecoder(b, e, shape25M, wdt, 1, 1, 64)
			ex := d.capture(b)
			d.replay(b, ex)
			bw := ReadBandwidth(0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d.replay(b, ex)
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(d.wbytes)/sec/1e9, "wGB/s")
			b.ReportMetric(bw/1e9, "memGB/s")
			b.ReportMetric(float64(d.wbytes)/sec/bw, "fraction")
			b.ReportMetric(1/sec, "tok/s")
		})
	}
}

// BenchmarkStepQuant times the 25M shape's decode step (batch 1 and 64,
// replayed) and its 512-token prefill (replayed) with quantized weights
// (the embedding stays float32 and the classifier is Q6_K, as in
// llama.cpp's files; Q4_K's and Q6_K's w2, whose 1376 inputs are not whole
// super-blocks, is Q4_0), with the elementwise and
// attention kernels in plain Go (/go) and on each vector set this CPU runs
// (the quantized matmul kernels on in both).
// `GOEXPERIMENT=simd go test -run XXX -bench StepQuant ./accel/cpu`
func BenchmarkStepQuant(b *testing.B) {
	for _, wdt := range []accel.DType{accel.Q8_0, accel.Q4_0, accel.Q4_K, accel.Q6_K} {
		for _, c := range [][2]int{{1, 1}, {64, 64}, {512, 1}} {
			T, R := c[0], c[1]
			name := fmt.Sprintf("25M/%s/bs%d", wdt, T)
			ctx := 64
			if R == 1 && T > 1 {
				name, ctx = fmt.Sprintf("25M/%s/T%d", wdt, T), T
			}
			for _, vk := range append([]*vecOps{nil}, vecSets()...) {
				set := "go"
				if vk != nil {
					set = vk.name
				}
				b.Run(name+"/"+set, func(b *testing.B) {
					withMode(b, kernelMode{vec: vk})
					e := acceltest.Open(b, "cpu", accel.Options{})
					d := newDecoder(b, e, shape25M, wdt, T, R, ctx)
					benchSteps(b, d, "replay")
				})
			}
		}
	}
}
