//go:build goexperiment.simd && amd64

package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/reprise-ml/reprise/internal/cputime"
)

// BenchmarkAttentionRunsWidth times the prefill attention of the 110M
// shape (12 heads of 64, two workers' halves) on the runs path with the
// AVX-512 set as it is (w16), without scoresT2 (w16x1) and with the AVX2
// set's eight-lane scoresT and avRows in its place (w8), and on the
// per-token path (token: the set without scoresT, as before the runs path
// was the AVX-512 set's), sub-benchmarks alternating: T queries at
// the end of a context of ctx, and a whole 512-token prompt (T512, each
// token attending to the positions up to its own). cpu-ns/op is the
// thread's CPU time, steadier than the wall time on a shared machine.
func BenchmarkAttentionRunsWidth(b *testing.B) {
	vk := vecBuilt
	if vk == nil || vk.name != "avx512" {
		b.Skip("no AVX-512 set on this CPU")
	}
	w8 := *vk
	w8.scoresT, w8.scoresT2, w8.avRows, w8.keysT8 = vScoresT8Go, nil, vAVRows8Go, vKeysT8Go
	w16x1 := *vk
	w16x1.scoresT2 = nil
	token := *vk
	token.scoresT, token.scoresT2, token.avRows, token.keysT8 = nil, nil, nil, nil
	sets := []struct {
		name string
		vk   *vecOps
	}{{"token", &token}, {"w8", &w8}, {"w16x1", &w16x1}, {"w16", vk}}
	for _, sh := range [][2]int{{32, 512}, {32, 2048}, {512, 512}} {
		T, ctx := sh[0], sh[1]
		r := rand.New(rand.NewPCG(1, 2))
		c := attnTail(r, T, ctx)
		units, _ := unitsAttention(c)
		k := &kctx{}
		for _, set := range sets {
			b.Run(fmt.Sprintf("T%d/ctx%d/%s", T, ctx, set.name), func(b *testing.B) {
				old := vec.Load()
				vec.Store(set.vk)
				defer vec.Store(old)
				// The thread's CPU time too: what the kernels needed, which
				// the machine's other work does not inflate.
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b.ResetTimer()
				cpu0 := cputime.Thread()
				for i := 0; i < b.N; i++ {
					runAttention(c, 0, units/2, k)
					runAttention(c, units/2, units, k)
				}
				b.ReportMetric(float64((cputime.Thread()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
