package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// penaltyValues are logits, biases and parameters with the edge cases of
// float32 arithmetic: signed zeros, infinities, NaN.
var penaltyValues = []float32{0, float32(math.Copysign(0, -1)), 1, -1, 2.5, -3.75, 1e-30, -1e30,
	float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}

// penalizeRow's short path for zero count words gives the bits
// accel.Penalize gives, element by element, whatever the logit, bias and
// parameters.
func TestPenalizeRowBits(t *testing.T) { withEachKernelSet(t, testPenalizeRowBits) }

func testPenalizeRowBits(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pick := func() float32 {
		if r.IntN(2) == 0 {
			return penaltyValues[r.IntN(len(penaltyValues))]
		}
		return float32(r.NormFloat64() * 4)
	}
	words := []int32{0, 0, 0, 1, 3, accel.PenaltyPromptBit, accel.PenaltyStopBit, accel.PenaltyStopBit | 2, accel.PenaltyPromptBit | accel.PenaltyStopBit}
	const V = 75 // a block of 64 and a part of one
	x, y, br := make([]float32, V), make([]float32, V), make([]float32, V)
	cr := make([]int32, V)
	for trial := 0; trial < 2000; trial++ {
		for j := range x {
			x[j], br[j], cr[j] = pick(), pick(), words[r.IntN(len(words))]
		}
		rep, pres, freq := pick(), pick(), pick()
		mask := r.IntN(2) == 0
		penalizeRow(y, x, cr, br, rep, pres, freq, mask)
		in := append([]float32(nil), x...)
		penalizeRow(in, in, cr, br, rep, pres, freq, mask) // in place
		for j := range y {
			if math.Float32bits(in[j]) != math.Float32bits(y[j]) {
				t.Fatalf("in place, logit %d: %v, out of place %v", j, in[j], y[j])
			}
			want := accel.Penalize(x[j], cr[j], br[j], rep, pres, freq, mask)
			if math.Float32bits(y[j]) != math.Float32bits(want) && !(y[j] != y[j] && want != want) {
				t.Fatalf("x %v, word %#x, bias %v, rep %v, pres %v, freq %v, mask %v: %v (%#x), Penalize gives %v (%#x)",
					x[j], cr[j], br[j], rep, pres, freq, mask, y[j], math.Float32bits(y[j]), want, math.Float32bits(want))
			}
		}
	}
}

// minPRow masks exactly the logits that exponentiating every one of them
// masks (math.Exp((z-max)/t) < min_p), logits placed on and around the
// threshold included.
func TestMinPRowExact(t *testing.T) { withEachKernelSet(t, testMinPRowExact) }

func testMinPRowExact(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	minPs := []float32{1, 0.5, 0.05, 1e-3, 1e-20, 1.5e-45, math.Nextafter32(1, 0)}
	temps := []float32{1, 0.8, 1e-3, 7, 1e-30}
	const V = 200
	y, want := make([]float32, V), make([]float32, V)
	for trial := 0; trial < 3000; trial++ {
		minP, temp := minPs[r.IntN(len(minPs))], temps[r.IntN(len(temps))]
		if trial%3 == 0 {
			minP, temp = float32(r.Float64()), float32(0.1+2*r.Float64())
		}
		m := float32(r.NormFloat64() * 5)
		// The threshold logit: z = max + t·log(min_p), then float32
		// neighbours on either side.
		th := m + temp*float32(math.Log(float64(minP)))
		for j := range y {
			switch k := r.IntN(8); {
			case k < 4:
				z := th
				for range r.IntN(5) {
					z = math.Nextafter32(z, float32(math.Inf(2*r.IntN(2)-1)))
				}
				y[j] = z
			case k == 4:
				y[j] = penaltyValues[r.IntN(len(penaltyValues))]
			default:
				y[j] = m - float32(r.ExpFloat64()*10)
			}
			if y[j] > m && !math.IsInf(float64(y[j]), 1) {
				y[j] = m
			}
		}
		if trial%2 == 0 {
			y[r.IntN(V)] = m
		}
		copy(want, y)
		mx := want[0]
		for _, z := range want {
			if z > mx {
				mx = z
			}
		}
		for j, z := range want {
			if math.Exp(float64((z-mx)/temp)) < float64(minP) {
				want[j] = float32(math.Inf(-1))
			}
		}
		minPRow(y, minP, temp)
		for j := range y {
			if math.Float32bits(y[j]) != math.Float32bits(want[j]) {
				t.Fatalf("min_p %v, t %v, max %v: logit %d is %v, exponentiating every logit gives %v", minP, temp, mx, j, y[j], want[j])
			}
		}
	}
}

// withEachKernelSet runs f, as subtests, with the plain-Go kernels and
// with each vector set this CPU runs in use.
func withEachKernelSet(t *testing.T, f func(t *testing.T)) {
	for _, vk := range append([]*vecOps{nil}, vecSets()...) {
		name := "go"
		if vk != nil {
			name = vk.name
		}
		t.Run(name, func(t *testing.T) {
			withMode(t, kernelMode{vec: vk})
			f(t)
		})
	}
}
