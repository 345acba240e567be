package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// expLP is within 5e-7 of e^a, relative, over its range, 0 below it and
// for NaN, +Inf above it.
func TestExpLPAccuracy(t *testing.T) {
	worst := 0.0
	for a := float32(lpExpMin); a <= lpExpMax; a += 0.0137 {
		for _, x := range []float32{a, math.Nextafter32(a, 0), -a} {
			if x < lpExpMin || x > lpExpMax {
				continue
			}
			want := math.Exp(float64(x))
			worst = max(worst, math.Abs(float64(expLP(x))-want)/want)
		}
	}
	t.Logf("worst relative error %.3g", worst)
	if worst > 5e-7 {
		t.Errorf("expLP relative error %.3g, want <= 5e-7", worst)
	}
	for _, c := range []struct{ a, want float32 }{
		{float32(math.Inf(-1)), 0}, {-1e30, 0}, {math.Nextafter32(lpExpMin, -100), 0},
		{float32(math.NaN()), 0}, {math.Nextafter32(lpExpMax, 100), float32(math.Inf(1))}, {float32(math.Inf(1)), float32(math.Inf(1))},
		{0, 1},
	} {
		if got := expLP(c.a); got != c.want {
			t.Errorf("expLP(%v) = %v, want %v", c.a, got, c.want)
		}
	}
}

// lpRows are rows for the kernels: random of several spreads and lengths
// (multiples of eight and not), ties, a dominant logit, infinities, NaN,
// signed zeros.
func lpRows() [][]float32 {
	r := rand.New(rand.NewPCG(7, 8))
	var rows [][]float32
	for _, n := range []int{20, 21, 27, 64, 100, 120, 300, 512, 515} {
		for _, spread := range []float64{0.01, 1, 4, 30, 100} {
			row := make([]float32, n)
			for i := range row {
				row[i] = float32(r.NormFloat64() * spread)
			}
			rows = append(rows, row)
		}
		ties := make([]float32, n)
		for i := range ties {
			ties[i] = float32(i % 7)
		}
		rows = append(rows, ties)
		zeros := make([]float32, n) // signed zeros tie: by index
		for i := range zeros {
			switch i % 3 {
			case 0:
				zeros[i] = float32(math.Copysign(0, -1))
			case 2:
				zeros[i] = -float32(i)
			}
		}
		rows = append(rows, zeros)
		special := make([]float32, n)
		vals := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN()), -90, 90, 1e30, -1e30}
		for i := range special {
			if r.IntN(4) == 0 {
				special[i] = vals[r.IntN(len(vals))]
			} else {
				special[i] = float32(r.NormFloat64())
			}
		}
		rows = append(rows, special)
	}
	return rows
}

// The vector kernels give the plain Go's bits: the sum of exponentials and
// the top k, on every row, with the vector set on and off.
func TestLogProbsVecBits(t *testing.T) {
	if !lpVecBuilt || len(vecRunnable) == 0 {
		t.Skip("no vector kernels for the log probabilities in this build")
	}
	old := vec.Load()
	defer vec.Store(old)
	for ri, row := range lpRows() {
		for _, k := range []int{1, 5, 20} {
			if k > len(row) {
				continue
			}
			var sums [2]float64
			var best [2][]int32
			var keys [2][]uint64
			for side, vk := range []*vecOps{nil, vecRunnable[len(vecRunnable)-1]} {
				vec.Store(vk)
				best[side], keys[side] = make([]int32, k), make([]uint64, k)
				topLP(row, best[side], keys[side], make([]uint64, (len(row)+63)/64))
				sums[side] = sumExpLP(row, row[best[side][0]])
			}
			if math.Float64bits(sums[0]) != math.Float64bits(sums[1]) && !(sums[0] != sums[0] && sums[1] != sums[1]) {
				t.Errorf("row %d (%d), k %d: sum %v plain Go, %v vector", ri, len(row), k, sums[0], sums[1])
			}
			if !slices.Equal(best[0], best[1]) {
				t.Errorf("row %d (%d), k %d: top %v plain Go, %v vector", ri, len(row), k, best[0], best[1])
			}
		}
	}
}

// topLP is the stable sort's first k (by value, then index) on rows
// without NaN, and sumExpLP is the float64 sum of math.Exp within 1e-6.
func TestTopLPSorted(t *testing.T) {
	for ri, row := range lpRows() {
		if slices.ContainsFunc(row, func(x float32) bool { return x != x || math.IsInf(float64(x), 0) }) {
			continue
		}
		order := make([]int32, len(row))
		for i := range order {
			order[i] = int32(i)
		}
		slices.SortStableFunc(order, func(a, b int32) int {
			switch {
			case row[a] > row[b]:
				return -1
			case row[a] < row[b]:
				return 1
			}
			return 0
		})
		k := min(20, len(row))
		best, keys := make([]int32, k), make([]uint64, k)
		topLP(row, best, keys, make([]uint64, (len(row)+63)/64))
		if !slices.Equal(best, order[:k]) {
			t.Errorf("row %d: top %v, want %v", ri, best, order[:k])
		}
		m := row[best[0]]
		want := 0.0
		for _, x := range row {
			want += math.Exp(float64(x - m))
		}
		if got := sumExpLP(row, m); math.Abs(got-want) > 1e-6*want {
			t.Errorf("row %d: sum %v, want %v", ri, got, want)
		}
	}
}

// BenchmarkLogProbsRow times the log probabilities' parts on one row of
// 512 normal logits (top 20): go test -run '^$' -bench LogProbsRow ./accel/cpu
func BenchmarkLogProbsRow(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	const R, V = 64, 512
	rows := make([]float32, R*V)
	for i := range rows {
		rows[i] = float32(r.NormFloat64() * 2)
	}
	best, keys, marks := make([]int32, 20), make([]uint64, 20), make([]uint64, V/64)
	b.Run("top20", func(b *testing.B) {
		i := 0
		for b.Loop() {
			topLP(rows[i*V:(i+1)*V], best, keys, marks)
			i = (i + 1) % R
		}
	})
	b.Run("sumexp", func(b *testing.B) {
		i := 0
		for b.Loop() {
			sumExpLP(rows[i*V:(i+1)*V], 3)
			i = (i + 1) % R
		}
	})
}
