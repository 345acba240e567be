package opencl_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// Top-k and top-p: every draw falls in the candidate set (the top-k by logit,
// then the smallest leading set reaching top-p), and the draws follow the
// renormalised probabilities of that set.
func TestSampleTopKTopP(t *testing.T) {
	e := open(t)
	r := rand.New(rand.NewPCG(41, 42))
	const V, draws = 30, 3000
	lv := acceltest.Rand(r, 3*V, 1.5)
	lv[2*V+4] = lv[2*V+9] // a tie
	temps := []float32{1, 0.7, 1}
	topk := []int32{4, 0, 6}
	topp := []float32{1, 0.6, 0.8}
	want := make([]map[int]float64, 3)
	for row := 0; row < 3; row++ {
		want[row] = acceltest.SampleCandidates(lv[row*V:(row+1)*V], temps[row], int(topk[row]), topp[row])
	}
	logits := e.F32(lv, 3, V)
	sv := make([]int32, 6)
	for row := 0; row < 3; row++ {
		sv[2*row], sv[2*row+1] = accel.SplitSeed(uint64(row + 1))
	}
	seed := e.I32(sv, 3, 2)
	off := e.Zeros(accel.I32, 1, 3)
	p := accel.SampleParams{Temperature: e.F32(temps, 1, 3), TopK: e.I32(topk, 1, 3), TopP: e.F32(topp, 1, 3), Seed: seed, Offset: off}
	out := e.Zeros(accel.I32, 1, 3)
	counts := [3]map[int]int{{}, {}, {}}
	// Many offsets at once: a batch of draws per launch, one row each.
	const batch = 100
	lb := make([]float32, 0, batch*V)
	var rowOf []int
	for i := 0; i < batch; i++ {
		lb = append(lb, lv[(i%3)*V:(i%3+1)*V]...)
		rowOf = append(rowOf, i%3)
	}
	bl := e.F32(lb, batch, V)
	bt, bk, bp := make([]float32, batch), make([]int32, batch), make([]float32, batch)
	bs := make([]int32, 2*batch)
	for i, row := range rowOf {
		bt[i], bk[i], bp[i] = temps[row], topk[row], topp[row]
		bs[2*i], bs[2*i+1] = accel.SplitSeed(uint64(row + 1))
	}
	bpar := accel.SampleParams{Temperature: e.F32(bt, 1, batch), TopK: e.I32(bk, 1, batch), TopP: e.F32(bp, 1, batch),
		Seed: e.I32(bs, batch, 2), Offset: e.Zeros(accel.I32, 1, batch)}
	bout := e.Zeros(accel.I32, 1, batch)
	offs := make([]int32, batch)
	for it := 0; it < draws*3/batch; it++ {
		for i := range offs {
			offs[i] = int32(it*batch + i)
		}
		e.WriteI32(bpar.Offset, offs)
		accel.On(e.S).Sample(bout, bl, bpar)
		for i, tok := range e.ReadI32(bout) {
			counts[rowOf[i]][int(tok)]++
		}
	}
	for row := 0; row < 3; row++ {
		n := 0
		for _, c := range counts[row] {
			n += c
		}
		for tok := range counts[row] {
			if _, ok := want[row][tok]; !ok {
				t.Errorf("row %d drew token %d outside its candidates %v", row, tok, keys(want[row]))
			}
		}
		for tok, pr := range want[row] {
			got := float64(counts[row][tok]) / float64(n)
			if math.Abs(got-pr) > 0.05 {
				t.Errorf("row %d token %d: drawn %.3f of the time, probability %.3f", row, tok, got, pr)
			}
		}
	}
	// The same (seed, offset) draws the same token in a batch and alone.
	accel.On(e.S).Sample(out, logits, p)
	alone := e.ReadI32(out)
	e.WriteI32(bpar.Offset, make([]int32, batch))
	accel.On(e.S).Sample(bout, bl, bpar)
	inBatch := e.ReadI32(bout)
	for row := 0; row < 3; row++ {
		if alone[row] != inBatch[row] {
			t.Errorf("row %d: %d alone, %d in a batch", row, alone[row], inBatch[row])
		}
	}
}

func keys(m map[int]float64) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
