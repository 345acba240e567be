//go:build goexperiment.simd && amd64

package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// BenchmarkPackPages compares packs on the Go heap ("heap") with packs on
// huge-page chunks ("huge") for a set of Q4_0 matrices of the 110M shape's
// w1 (768 in, 2048 out) three times the size of this machine's 32 MiB L3,
// so that, as in a batch-1 decode step, every panel comes from DRAM: one
// batch-1 matmul over every pack of the set, on one thread (GB/s of packed
// bytes). What packing costs in page faults is a model load's, measured
// on the binary (a benchmark's repeated packs would reuse the heap's
// memory but not the unmapped chunks').
func BenchmarkPackPages(b *testing.B) {
	if !quantVecBuilt {
		b.Skip("no quantized vector kernels here")
	}
	r := rand.New(rand.NewPCG(3, 4))
	const in, out, setBytes = 768, 2048, 96 << 20
	c, _, _ := quantCall(b, r, accel.Q4_0, 1, out, in)
	units := (out + panelWidth - 1) / panelWidth
	one := int64(uintptr(units) * packedPanelBytes(accel.Q4_0, in))
	n := int(setBytes / one)
	for _, mode := range []struct {
		name string
		a    func() *hugeAlloc
	}{{"heap", func() *hugeAlloc { return nil }}, {"huge", func() *hugeAlloc { return &hugeAlloc{} }}} {
		if mode.name == "huge" && !hugePagesOn() {
			b.Logf("huge pages are off here: %s", hugeWhy())
			continue
		}
		b.Run(fmt.Sprintf("stream/%s/%dx%d/%dMiB", mode.name, in, out, int64(n)*one>>20), func(b *testing.B) {
			a := mode.a()
			ps := make([]*packed, n)
			for i := range ps {
				ps[i] = packWeightsIn(c.o[2], a)
			}
			k := &kctx{}
			quantizeActs(&k.qa, c.o[1].f32(), in, 0, 1, kBlocks(accel.Q4_0))
			b.ResetTimer()
			for b.Loop() {
				for _, p := range ps {
					runMatMulQuantVec(c, &k.qa, p, 0, units, 0, 1, k)
				}
			}
			b.ReportMetric(float64(int64(n)*one)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			runtime.KeepAlive(ps)
		})
	}
}
