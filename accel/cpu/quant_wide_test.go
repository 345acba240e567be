package cpu

import (
	"fmt"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// shapeWide's matrices are K-quant sized (rows of whole 256s) and small
// enough to split by rows from rowSplitMin rows: on two threads, 23 rows
// are pieces of 11 and 12 rows, on either side of quantWideMin (amd64: a
// K-quant panel is widened from that many rows), where one thread runs all
// 23 in one piece, widened, the last row on the one-row kernel.
var shapeWide = modelShape{"wide", 256, 512, 1, 2, 2, 512}

// TestQuantWideThreads: a Q4_K step with a Q6_K classifier gives the same
// logits on one thread as on two, eager and replayed, bit for bit, where
// the paths differ by rows per piece (widened panels or not). (One row
// count: about 4 s under -race.)
func TestQuantWideThreads(t *testing.T) {
	if !quantVecBuilt {
		t.Skip("no quantized vector kernels here: one path only")
	}
	for _, T := range []int{23} {
		t.Run(fmt.Sprintf("T%d", T), func(t *testing.T) {
			var want []float32
			for _, threads := range []int{1, 2} {
				e := acceltest.Open(t, "cpu", accel.Options{Threads: threads})
				d := newDecoder(t, e, shapeWide, accel.Q4_K, T, T, 20)
				d.eager(t)
				got := e.ReadF32(d.logits)
				if want == nil {
					want = got
				} else if i, ok := bitsEqual(got, want); !ok {
					t.Fatalf("%d threads eager: logit %d = %v, one thread %v", threads, i, got[i], want[i])
				}
				ex := d.capture(t)
				for rep := 0; rep < 2; rep++ {
					e.Zero(d.logits)
					d.replay(t, ex)
					if i, ok := bitsEqual(e.ReadF32(d.logits), want); !ok {
						t.Fatalf("%d threads replay %d: logit %d = %v, one thread eager %v", threads, rep, i, e.ReadF32(d.logits)[i], want[i])
					}
				}
			}
		})
	}
}
