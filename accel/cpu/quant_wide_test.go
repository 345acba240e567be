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

// TestScheduleReusesActs: in a replayed step on two workers, the k and v
// projections and w3 reuse the quantized x of the matmul before them on
// each worker (q's, w1's), and the logits are the eager launch's, bit for
// bit, for one row (the one-row kernels on spread x) and three (the
// many-row kernels).
func TestScheduleReusesActs(t *testing.T) {
	e := acceltest.Open(t, "cpu", accel.Options{Threads: 2})
	for _, dt := range []accel.DType{accel.Q8_0, accel.Q4_0, accel.Q4_K} {
		for _, T := range []int{1, 3} {
			d := newDecoder(t, e, shapeWide, dt, T, T, 20)
			d.eager(t)
			want := e.ReadF32(d.logits)
			ex := d.capture(t)
			if st, min := ex.(*exec).Schedule(), 3*d.sh.layers*2; st.ReusedActs < min {
				t.Errorf("%s, %d rows: schedule %+v: want at least %d pieces reusing x", dt, T, st, min)
			}
			for rep := 0; rep < 2; rep++ {
				e.Zero(d.logits)
				d.replay(t, ex)
				if i, ok := bitsEqual(e.ReadF32(d.logits), want); !ok {
					t.Fatalf("%s, %d rows, replay %d: logit %d = %v, eager %v", dt, T, rep, i, e.ReadF32(d.logits)[i], want[i])
				}
			}
		}
	}
}

// shapeKRows' feed-forward matrices are K-quant sized and, at 295 KB of
// Q4_K, over matRowSplitMax: they split by rows only as quantRowSplit
// lets them (a decode step of at most kRowSplitMax rows).
var shapeKRows = modelShape{"krows", 256, 2048, 1, 4, 4, 512}

// TestQuantKRowSplit: a 32-row Q4_K decode step over two workers splits
// every matmul by rows (barriers only around the attention, as the f32
// step's: TestScheduleBarriers), and its replays give the eager launch's
// logits bit for bit (16-row widened pieces against its four-row
// unwidened chunks).
// (The vector kernels' build only: 5-8 s under -race with them, twice
// that on the plain-Go kernels, whose one path the other tests cover.)
func TestQuantKRowSplit(t *testing.T) {
	if !quantVecBuilt {
		t.Skip("no quantized vector kernels here: one path only")
	}
	const T = quantRowSplitMin
	e := acceltest.Open(t, "cpu", accel.Options{Threads: 2})
	d := newDecoder(t, e, shapeKRows, accel.Q4_K, T, T, 20)
	d.eager(t)
	want := e.ReadF32(d.logits)
	ex := d.capture(t)
	if st := ex.(*exec).Schedule(); st.Barriers > 2*d.sh.layers+2 {
		t.Errorf("%d rows: schedule %+v: want at most %d barriers\n%s", T, st, 2*d.sh.layers+2, ex.(*exec).cur.Load().sched)
	}
	for rep := 0; rep < 2; rep++ { // the first prepares the executable
		e.Zero(d.logits)
		d.replay(t, ex)
		if i, ok := bitsEqual(e.ReadF32(d.logits), want); !ok {
			t.Fatalf("replay %d: logit %d = %v, eager %v", rep, i, e.ReadF32(d.logits)[i], want[i])
		}
	}
}
