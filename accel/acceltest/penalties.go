package acceltest

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// refPenalize is OpPenalize written from its definition, in float64: the
// stop mask, the bias, the repetition penalty on seen tokens, frequency and
// presence, then min_p against the processed row's maximum.
func refPenalize(x []float32, counts []int32, bias []float32, rows []int32, params, temp []float32, v, n int) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/v; r++ {
		y := out[r*v : (r+1)*v]
		p := params[4*r : 4*r+4]
		i := int(rows[2*r])
		for j := range y {
			z := float64(x[r*v+j])
			if i >= 0 && i < n {
				c := counts[i*v+j]
				cnt := float64(c & accel.PenaltyCountMask)
				if rows[2*r+1]&accel.PenaltyMaskStops != 0 && c&accel.PenaltyStopBit != 0 {
					z = math.Inf(-1)
				}
				z += float64(bias[i*v+j])
				if cnt > 0 || c&accel.PenaltyPromptBit != 0 {
					if z > 0 {
						z /= float64(p[0])
					} else {
						z *= float64(p[0])
					}
				}
				z -= float64(p[2]) * cnt
				if cnt > 0 {
					z -= float64(p[1])
				}
			}
			y[j] = z
		}
		if p[3] > 0 && temp[r] > 0 {
			m := slices.Max(y)
			for j, z := range y {
				if math.Exp((z-m)/float64(temp[r])) < float64(p[3]) {
					y[j] = math.Inf(-1)
				}
			}
		}
	}
	return out
}

// closeInf is Close that also insists on the same infinities.
func closeInf(got []float32, want []float64, tol float64) (int, bool) {
	for i, w := range want {
		g := float64(got[i])
		if math.IsInf(w, 0) || math.IsInf(g, 0) {
			if g != w {
				return i, false
			}
			continue
		}
		if math.Abs(g-w) > tol*math.Max(1, math.Abs(w)) {
			return i, false
		}
	}
	return 0, true
}

// OpPenalize against its float64 definition (rows with and without a pool
// row, masked stops, min_p, in place); OpCountTokens counts into the pool,
// keeping the flags and skipping rows without one; on a device that
// captures, a replay of both equals eager, bit for bit where the device is
// deterministic.
func testPenalties(t *testing.T, backend string) {
	e := Open(t, backend, accel.Options{})
	r := rand.New(rand.NewPCG(91, 92))
	const R, V, N = 6, 300, 4
	lv := Rand(r, R*V, 2)
	counts := make([]int32, N*V)
	bias := make([]float32, N*V)
	for i := range counts {
		switch r.IntN(6) {
		case 0:
			counts[i] = int32(1 + r.IntN(3))
		case 1:
			counts[i] = accel.PenaltyPromptBit
		case 2:
			counts[i] = accel.PenaltyPromptBit | int32(1+r.IntN(2))
		}
		if r.IntN(50) == 0 {
			counts[i] |= accel.PenaltyStopBit
		}
		if r.IntN(10) == 0 {
			bias[i] = float32(r.IntN(21) - 10)
		}
	}
	// Row 1 has no pool row, row 5 one outside the pool; rows 1 and 3
	// filter with min_p; rows 0 and 3 mask their stop tokens; row 4's pool
	// row has no bias, and its flags say so.
	clear(bias[1*V : 2*V])
	rows := []int32{2, accel.PenaltyMaskStops, -1, 0, 0, 0, 3, accel.PenaltyMaskStops, 1, accel.PenaltyNoBias, 9, 0}
	params := []float32{1.3, 0.5, 0.25, 0, 1, 0, 0, 0.2, 1, 0, 0, 0, 0.7, 1.5, 0.4, 0.05, 2, 0, 0, 0, 1.1, 1, 1, 0}
	temp := []float32{1, 0.8, 0, 1.2, 1, 0.5}
	want := refPenalize(lv, counts, bias, rows, params, temp, V, N)
	p := accel.PenaltyParams{Counts: e.I32(counts, N, V), Bias: e.F32(bias, N, V), Rows: e.I32(rows, R, 2),
		Params: e.F32(params, R, 4), Temperature: e.F32(temp, 1, R)}
	check := func(what string, got []float32) {
		t.Helper()
		if i, ok := closeInf(got, want, 1e-6); !ok {
			t.Fatalf("%s: element %d (row %d): %v, want %v", what, i, i/V, got[i], want[i])
		}
	}
	logits, out := e.F32(lv, R, V), e.Zeros(accel.F32, R, V)
	accel.On(e.S).Penalize(out, logits, p)
	got := e.ReadF32(out)
	check("penalize", got)
	if !slices.Equal(got[5*V:], lv[5*V:]) {
		t.Errorf("a row outside the pool changed")
	}
	masked := 0
	for _, w := range want {
		if math.IsInf(w, -1) {
			masked++
		}
	}
	if masked == 0 {
		t.Fatal("the case masks nothing")
	}
	accel.On(e.S).Penalize(logits, logits, p)
	check("in place", e.ReadF32(logits))

	// Counting: row 1 has no pool row, row 5's is outside, row 4's token
	// is outside the vocabulary.
	toks := []int32{7, 8, 9, 299, 300, 5}
	accel.On(e.S).CountTokens(p.Counts, p.Rows, e.I32(toks, 1, R))
	wantC := slices.Clone(counts)
	wantC[2*V+7]++
	wantC[0*V+9]++
	wantC[3*V+299]++
	if got := e.ReadI32(p.Counts); !slices.Equal(got, wantC) {
		for i := range got {
			if got[i] != wantC[i] {
				t.Fatalf("counts[%d][%d] = %#x, want %#x", i/V, i%V, got[i], wantC[i])
			}
		}
	}

	if !e.Dev.Capability().GraphCapture {
		return
	}
	pool, err := e.Dev.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Release)
	tok := e.I32(toks, 1, R)
	step := func(l *accel.Launcher) {
		l.Penalize(out, logits, p)
		l.CountTokens(p.Counts, p.Rows, tok)
	}
	e.WriteF32(logits, lv)
	g := capture(t, e, pool, step)
	defer g.Destroy()
	ex, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Destroy()
	upload := func(c []int32) {
		if err := accel.Upload(e.S, p.Counts.Buf.Slice(0, p.Counts.Bytes()), accel.I32Bytes(c)); err != nil {
			t.Fatal(err)
		}
	}
	var eager [2][]float32
	var eagerC []int32
	upload(counts)
	for i := range eager {
		l := accel.On(e.S)
		step(l)
		if l.Err() != nil {
			t.Fatal(l.Err())
		}
		eager[i] = e.ReadF32(out)
	}
	eagerC = e.ReadI32(p.Counts)
	upload(counts)
	for i := range eager {
		if err := ex.Launch(e.S); err != nil {
			t.Fatal(err)
		}
		if err := Same(e.Dev, e.ReadF32(out), eager[i], 1e-6); err != nil {
			t.Fatalf("replay %d: %v", i, err)
		}
	}
	if got := e.ReadI32(p.Counts); !slices.Equal(got, eagerC) {
		t.Fatal("replayed counts differ from eager")
	}
	if eagerC[2*V+7] != counts[2*V+7]+2 {
		t.Fatalf("two steps counted token 7 of pool row 2 to %#x from %#x", eagerC[2*V+7], counts[2*V+7])
	}
}
