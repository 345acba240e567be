package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/reprise-ml/reprise/internal/cputime"
)

// BenchmarkAttentionBatch64 times the attention of the 110M shape's
// 64-sequence decode step (12 heads of 64, no grouping) at short and long
// contexts, split in two workers' halves as the schedule splits it. "cold"
// rotates over enough layers' caches (each its own pages) that their keys
// and values are out of the caches when read again, as in a step, where the
// weights pass through them between two layers' attention; "hot" repeats
// one layer.
func BenchmarkAttentionBatch64(b *testing.B) {
	const T = 64
	for _, ctx := range []int{12, 256} {
		for _, cold := range []bool{false, true} {
			layers := 1
			if cold {
				// At least 128 MiB of keys and values over the rotation.
				layers = max(2, 128<<20/(2*T*ctx*12*64*4))
			}
			var cs []*rcall // made on the first run, for this case only
			calls := func() []*rcall {
				if cs == nil {
					r := rand.New(rand.NewPCG(1, 2))
					for range layers {
						c := attnCall(r, T, 12, 12, 64, 16, ctx)
						pos := c.o[5].i32()
						for i := range pos {
							pos[i] = int32(ctx - 1)
						}
						cs = append(cs, c)
					}
				}
				return cs
			}
			k := &kctx{}
			name := fmt.Sprintf("ctx%d/hot", ctx)
			if cold {
				name = fmt.Sprintf("ctx%d/cold", ctx)
			}
			var hs []*rcall // the same calls over F16 caches
			halfCalls := func() []*rcall {
				if hs == nil {
					for _, c := range calls() {
						hs = append(hs, halfCache(c))
					}
				}
				return hs
			}
			// "set" is the build's kernel set; "general" the same without
			// its decode path (attnDec), where it has one: the per-token
			// path it replaces, timed in the same run; "f16" the set over
			// F16 caches.
			for _, variant := range []string{"set", "general", "f16"} {
				b.Run(name+"/"+variant, func(b *testing.B) {
					if vecBuilt == nil {
						b.Skip("no vector kernels in this build")
					}
					vk := vecBuilt
					if variant == "general" {
						if vk.attnDec == nil {
							b.Skip("the set has no decode path")
						}
						g := *vk
						g.attnDec = nil
						vk = &g
					}
					cs := calls()
					if variant == "f16" {
						cs = halfCalls()
					}
					units, _ := unitsAttention(cs[0])
					old := vec.Load()
					defer vec.Store(old)
					vec.Store(vk)
					// The thread's CPU time: what the kernel needed, which the
					// machine's other work does not inflate.
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					b.ResetTimer()
					cpu0 := cputime.Thread()
					for i := 0; i < b.N; i++ {
						c := cs[i%layers]
						runAttention(c, 0, units/2, k)
						runAttention(c, units/2, units, k)
					}
					per := float64(b.N) * float64(units)
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per, "ns/item")
					b.ReportMetric(float64((cputime.Thread()-cpu0).Nanoseconds())/per, "cpu-ns/item")
				})
			}
		}
	}
}
