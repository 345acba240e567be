package cpu

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// On amd64 one of the Go variants of math.Exp is the one in use, and the
// chosen exponential gives math.Exp's bits on many arguments besides the
// probes: random ones over the whole range, tiny, huge, out of the fast
// range, NaN and the infinities (through sumExpShift, one element at a
// time and as a row).
func TestExp64Bits(t *testing.T) {
	t.Logf("exp64 variant %d, vector %v (built %v)", exp64Variant, exp64VecOK, exp64VecBuilt)
	if runtime.GOARCH == "amd64" && exp64Variant == 0 {
		// They are Go 1.26's amd64 routine written out: a Go release that
		// changed it leaves them unused (math.Exp runs, slower).
		t.Error("neither Go variant gives math.Exp's bits on this amd64 machine")
	}
	if exp64VecBuilt && exp64Variant == 1 && !exp64VecOK {
		t.Error("the vector exponential disagrees with math.Exp where its scalar twin agrees")
	}
	r := rand.New(rand.NewPCG(7, 8))
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 700, -700, 701, -701, -745, -746, -1e4, 88, -103,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32}
	var xs []float32
	for range 200000 {
		switch r.IntN(3) {
		case 0:
			xs = append(xs, float32(r.NormFloat64()*10))
		case 1:
			xs = append(xs, float32(-r.ExpFloat64()*50))
		default:
			xs = append(xs, float32((r.Float64()*2-1)*expFastRange))
		}
	}
	for _, x := range append(special, xs...) {
		w := math.Exp(float64(x))
		if g := sumExpShift([]float32{x}, 0); math.Float64bits(g) != math.Float64bits(w) && !(math.IsNaN(g) && math.IsNaN(w)) {
			t.Fatalf("exp(%v) = %v (%#x), math.Exp gives %v (%#x)", x, g, math.Float64bits(g), w, math.Float64bits(w))
		}
	}
	// Special values among ordinary ones, in vector lanes and tails.
	for n := 1; n <= 11; n++ {
		for _, sp := range special {
			row := append(slices.Clone(xs[:n-1]), sp)
			slices.Reverse(row[n/2:])
			want := 0.0
			for _, x := range row {
				want += math.Exp(float64(x - 1))
			}
			if got := sumExpShift(row, 1); math.Float64bits(got) != math.Float64bits(want) && !(math.IsNaN(got) && math.IsNaN(want)) {
				t.Fatalf("row %v: sum %v, math.Exp's loop gives %v", row, got, want)
			}
		}
	}
	xs = append(xs, 1, 2, 3)
	want, m := 0.0, float32(3)
	for _, x := range xs {
		want += math.Exp(float64(x - m))
	}
	if got := sumExpShift(xs, m); math.Float64bits(got) != math.Float64bits(want) {
		t.Fatalf("the sum is %v, math.Exp's loop gives %v", got, want)
	}
}

func BenchmarkExp64(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	x := make([]float32, 32000)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 3)
	}
	var sink float64
	b.Run("math.Exp", func(b *testing.B) {
		for b.Loop() {
			s := 0.0
			for _, v := range x {
				s += math.Exp(float64(v - 10))
			}
			sink += s
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/exp")
	})
	b.Run("sumExpShift", func(b *testing.B) {
		for b.Loop() {
			sink += sumExpShift(x, 10)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/exp")
	})
	_ = sink
}
