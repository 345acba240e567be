package acceltest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// The kernels of the newer checkpoints' attention (Llama 3, Qwen2, Qwen3):
// OpRoPETable, OpAddRow, and OpRMSNorm over a per-head view. The float64
// references follow the Ops' definitions in package accel.

// refRoPETable rotates each head of v [T, cols] by pos·freqs[i], pair i being
// (2i, 2i+1) or (i, i+hd/2).
func refRoPETable(v []float32, pos []int32, cols, hd int, freqs []float32, layout accel.RoPELayout) []float32 {
	out := make([]float32, len(v))
	copy(out, v)
	for t := range pos {
		for h := 0; h < cols; h += hd {
			for i := 0; i < hd/2; i++ {
				i0, i1 := 2*i, 2*i+1
				if layout == accel.RoPEHalves {
					i0, i1 = i, i+hd/2
				}
				ang := float64(pos[t]) * float64(freqs[i])
				a, b := float64(v[t*cols+h+i0]), float64(v[t*cols+h+i1])
				out[t*cols+h+i0] = float32(a*math.Cos(ang) - b*math.Sin(ang))
				out[t*cols+h+i1] = float32(a*math.Sin(ang) + b*math.Cos(ang))
			}
		}
	}
	return out
}

func testArchKernels(t *testing.T, backend string) {
	e := Open(t, backend, accel.Options{})
	r := rand.New(rand.NewPCG(17, 18))

	t.Run("RoPETable", func(t *testing.T) {
		pos := []int32{0, 1, 7, 100, 511, 3, 8191, 40000}
		rows := len(pos)
		for _, sh := range []struct{ hq, hk, hd int }{{4, 2, 8}, {3, 1, 12}, {2, 2, 64}} {
			for _, layout := range []accel.RoPELayout{accel.RoPEInterleaved, accel.RoPEHalves} {
				name := fmt.Sprintf("%dx%d/%d/%v", sh.hq, sh.hk, sh.hd, layout)
				freqs := accel.RoPEFreqs(sh.hd, 500000)
				for i := len(freqs) / 2; i < len(freqs); i++ {
					freqs[i] /= 8
				}
				qv, kv := Rand(r, rows*sh.hq*sh.hd, 1), Rand(r, rows*sh.hk*sh.hd, 1)
				q, k := e.F32(qv, rows, sh.hq*sh.hd), e.F32(kv, rows, sh.hk*sh.hd)
				accel.On(e.S).RoPETable(q, k, e.I32(pos, 1, rows), e.F32(freqs, 1, sh.hd/2), sh.hd, layout)
				// Angles up to 40000 radians: float32 angles are within
				// an ulp of 40000 (0.004), so the tolerance is wide.
				if err := Close(e.ReadF32(q), refRoPETable(qv, pos, sh.hq*sh.hd, sh.hd, freqs, layout), 1e-2); err != nil {
					t.Errorf("%s: q: %v", name, err)
				}
				if err := Close(e.ReadF32(k), refRoPETable(kv, pos, sh.hk*sh.hd, sh.hd, freqs, layout), 1e-2); err != nil {
					t.Errorf("%s: k: %v", name, err)
				}
			}
		}
		// With RoPEFreqs' table and interleaved pairs it is OpRoPE, bit
		// for bit on a deterministic device.
		const hd = 16
		qv, kv := Rand(r, rows*4*hd, 1), Rand(r, rows*2*hd, 1)
		p := e.I32(pos, 1, rows)
		q1, k1 := e.F32(qv, rows, 4*hd), e.F32(kv, rows, 2*hd)
		q2, k2 := e.F32(qv, rows, 4*hd), e.F32(kv, rows, 2*hd)
		accel.On(e.S).RoPE(q1, k1, p, hd, 10000)
		accel.On(e.S).RoPETable(q2, k2, p, e.F32(accel.RoPEFreqs(hd, 10000), 1, hd/2), hd, accel.RoPEInterleaved)
		if err := Same(e.Dev, e.ReadF32(q2), e.ReadF32(q1), 1e-5); err != nil {
			t.Errorf("table of RoPEFreqs against OpRoPE: q: %v", err)
		}
		if err := Same(e.Dev, e.ReadF32(k2), e.ReadF32(k1), 1e-5); err != nil {
			t.Errorf("table of RoPEFreqs against OpRoPE: k: %v", err)
		}
		// A table of the wrong length or an unknown layout is refused.
		l := accel.On(e.S)
		l.RoPETable(q1, k1, p, e.F32(make([]float32, hd), 1, hd), hd, accel.RoPEHalves)
		if l.Err() == nil {
			t.Error("a table of hd frequencies for hd/2 pairs was accepted")
		}
		l = accel.On(e.S)
		l.RoPETable(q1, k1, p, e.F32(make([]float32, hd/2), 1, hd/2), hd, 2)
		if l.Err() == nil {
			t.Error("pair layout 2 was accepted")
		}
	})

	t.Run("AddRow", func(t *testing.T) {
		// Few rows and many (the CPU device splits the two differently),
		// rows not a multiple of its 16-column bands.
		for _, sh := range [][2]int{{1, 40}, {5, 24}, {20, 72}} {
			rows, n := sh[0], sh[1]
			xv, bv := Rand(r, rows*n, 2), Rand(r, n, 2)
			want := make([]float32, rows*n)
			for i := range want {
				want[i] = xv[i] + bv[i%n]
			}
			x, b, out := e.F32(xv, rows, n), e.F32(bv, 1, n), e.Zeros(accel.F32, rows, n)
			accel.On(e.S).AddRow(out, x, b)
			if err := Close(e.ReadF32(out), want, 0); err != nil {
				t.Errorf("%v: %v", sh, err)
			}
			accel.On(e.S).AddRow(x, x, b)
			if err := Close(e.ReadF32(x), want, 0); err != nil {
				t.Errorf("%v in place: %v", sh, err)
			}
		}
		l := accel.On(e.S)
		l.AddRow(e.Zeros(accel.F32, 2, 8), e.Zeros(accel.F32, 2, 8), e.Zeros(accel.F32, 1, 4))
		if l.Err() == nil {
			t.Error("a row of 4 added to rows of 8 was accepted")
		}
	})

	t.Run("PerHeadRMSNorm", func(t *testing.T) {
		// q [T, H·hd] normalised head by head: OpRMSNorm over the
		// [T·H, hd] view of the same storage, in place.
		rows, h, hd := 5, 3, 16
		xv, wv := Rand(r, rows*h*hd, 2), Rand(r, hd, 1)
		x := e.F32(xv, rows, h*hd)
		xh := x.Reshape(rows*h, hd)
		accel.On(e.S).RMSNorm(xh, xh, e.F32(wv, 1, hd), 1e-6)
		if err := Close(e.ReadF32(x), refRMSNorm(xv, wv, rows*h, hd, 1e-6), 2e-4); err != nil {
			t.Error(err)
		}
	})
}
