package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// ropeCall is an OpRoPE of T tokens, nq query and nk key heads of hd, at
// positions pos with base theta, on copies of q and k.
func ropeCall(q, k []float32, pos []int32, T, hd, nq, nk int, theta float32) *rcall {
	f32op := func(v []float32, cols int) operand {
		v = append([]float32(nil), v...)
		return operand{b: unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v)), rows: T, cols: cols, dt: accel.F32}
	}
	p := append([]int32(nil), pos...)
	c := &rcall{op: accel.OpRoPE}
	c.o[0], c.o[1] = f32op(q, nq*hd), f32op(k, nk*hd)
	c.o[2] = operand{b: unsafe.Slice((*byte)(unsafe.Pointer(&p[0])), 4*len(p)), rows: T, cols: 1, dt: accel.I32}
	c.i[0], c.f[0] = hd, theta
	return c
}

// TestRoPEAnglesReused: a worker's kernel context, reused across calls as
// a step's layers reuse it, gives the bits of a fresh one, whether the
// next call has the same positions (the cached angles), other positions
// for some tokens, more tokens, or another base (other frequencies).
func TestRoPEAnglesReused(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const hd, nq, nk = 64, 8, 2
	k := &kctx{}
	for i, step := range []struct {
		T     int
		pos   func(t int) int32
		theta float32
	}{
		{5, func(t int) int32 { return int32(10 + t) }, 10000},
		{5, func(t int) int32 { return int32(10 + t) }, 10000},
		{5, func(t int) int32 { return int32(10 + t + t%2) }, 10000},
		{9, func(t int) int32 { return int32(3 * t) }, 10000},
		{9, func(t int) int32 { return int32(3 * t) }, 500000},
		{2, func(t int) int32 { return int32(3 * t) }, 500000},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			q := make([]float32, step.T*nq*hd)
			kk := make([]float32, step.T*nk*hd)
			for j := range q {
				q[j] = r.Float32()*2 - 1
			}
			for j := range kk {
				kk[j] = r.Float32()*2 - 1
			}
			pos := make([]int32, step.T)
			for j := range pos {
				pos[j] = step.pos(j)
			}
			want := ropeCall(q, kk, pos, step.T, hd, nq, nk, step.theta)
			got := ropeCall(q, kk, pos, step.T, hd, nq, nk, step.theta)
			n, _ := unitsRoPE(want)
			runRoPE(want, 0, n, &kctx{})
			// Two pieces, as two workers' parts of a schedule would be,
			// on the one reused context.
			runRoPE(got, 0, n/2, k)
			runRoPE(got, n/2, n, k)
			for o := 0; o < 2; o++ {
				if j, ok := bitsEqual(got.o[o].f32(), want.o[o].f32()); !ok {
					t.Fatalf("operand %d element %d: %g with the reused context, %g fresh", o, j, got.o[o].f32()[j], want.o[o].f32()[j])
				}
			}
		})
	}
}
