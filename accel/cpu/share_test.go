package cpu

import (
	"fmt"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// TestShareClaim: W goroutines claiming a shared piece's units, run after
// run, take every unit exactly once per run, in chunks of whole grains
// (but the last), with nothing reset between runs.
func TestShareClaim(t *testing.T) {
	for _, c := range []struct{ n, W, grain int }{{1, 2, 1}, {48, 2, 1}, {128, 2, 4}, {130, 3, 4}, {7, 2, 4}} {
		t.Run(fmt.Sprintf("n%d/W%d/g%d", c.n, c.W, c.grain), func(t *testing.T) {
			s := &shareClaim{n: c.n, W: c.W, grain: c.grain}
			for r := uint64(0); r < 5; r++ {
				seen := make([]int, c.n)
				var mu sync.Mutex
				var wg sync.WaitGroup
				for w := 0; w < c.W; w++ {
					wg.Go(func() {
						for {
							lo, hi, ok := s.claim(r)
							if !ok {
								return
							}
							mu.Lock()
							if lo < 0 || hi > c.n || lo >= hi || lo%c.grain != 0 || (hi-lo)%c.grain != 0 && hi != c.n {
								t.Errorf("run %d: chunk [%d, %d) of %d in grains of %d", r, lo, hi, c.n, c.grain)
							}
							for u := lo; u < hi && u >= 0 && u < c.n; u++ {
								seen[u]++
							}
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				for u, k := range seen {
					if k != 1 {
						t.Fatalf("run %d: unit %d claimed %d times", r, u, k)
					}
				}
			}
		})
	}
}

// TestScheduleShared: matmuls split by panels over many rows (a float32
// batch's too big to split by rows, a K-quant prefill's) are shared pieces
// on two and three workers, w3 reusing w1's quantized
// x; the replays, and a replay run by one goroutine alone (claiming every
// chunk itself), give the one-thread eager logits bit for bit.
func TestScheduleShared(t *testing.T) {
	for _, sc := range []struct {
		sh     modelShape
		wdt    accel.DType
		T, R   int
		reused int
	}{{shapeMixed, accel.F32, 24, 24, 0}, {shapeKRows, accel.Q4_K, kRowSplitMax + 1, 1, 1}} {
		t.Run(fmt.Sprintf("%s/%s/T%d", sc.sh.name, sc.wdt, sc.T), func(t *testing.T) {
			var want []float32
			for _, threads := range []int{1, 2, 3} {
				e := acceltest.Open(t, "cpu", accel.Options{Threads: threads})
				d := newDecoder(t, e, sc.sh, sc.wdt, sc.T, sc.R, max(20, sc.T))
				d.eager(t)
				if want == nil {
					want = e.ReadF32(d.logits)
					continue
				}
				ex := d.capture(t)
				for rep := 0; rep < 3; rep++ {
					e.Zero(d.logits)
					d.replay(t, ex)
					if i, ok := bitsEqual(e.ReadF32(d.logits), want); !ok {
						t.Fatalf("%d threads, replay %d: logit %d = %v, one thread eager %v", threads, rep, i, e.ReadF32(d.logits)[i], want[i])
					}
				}
				s := ex.(*exec).cur.Load().sched
				if st := s.stats; st.Shared == 0 || st.ReusedActs < sc.reused*threads {
					t.Fatalf("%d threads: schedule %+v: want shared pieces, at least %d reusing x", threads, st, sc.reused*threads)
				}
				if i, ok := bitsEqual(aloneLogits(t, e, d, s), want); !ok {
					t.Fatalf("%d threads, one goroutine: logit %d differs", threads, i)
				}
			}
		})
	}
}
