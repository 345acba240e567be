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

// TestRoPEVecPlain: runRoPE on each vector set gives the plain-Go
// rotations' bits, for interleaved pairs (OpRoPE) and halves (OpRoPETable),
// grouped and ungrouped key heads, head-major and token-major units, in
// pieces that cut heads' runs anywhere.
func TestRoPEVecPlain(t *testing.T) {
	needVec(t)
	old := vec.Load()
	defer vec.Store(old)
	r := rand.New(rand.NewPCG(7, 8))
	for _, sh := range []struct{ hd, nq, nk, T int }{
		{64, 8, 2, 5}, {64, 8, 8, 20}, {16, 4, 1, 17}, {128, 4, 4, 3}, {72, 6, 2, 16}, {6, 3, 3, 2}, {64, 2, 4, 4},
	} {
		for _, halves := range []bool{false, true} {
			t.Run(fmt.Sprintf("hd%d/q%d/k%d/T%d/halves=%v", sh.hd, sh.nq, sh.nk, sh.T, halves), func(t *testing.T) {
				q := specialF32(r, sh.T*sh.nq*sh.hd, 2)
				kk := specialF32(r, sh.T*sh.nk*sh.hd, 2)
				pos := make([]int32, sh.T)
				for j := range pos {
					pos[j] = int32(r.IntN(5000))
				}
				call := func() *rcall {
					c := ropeCall(q, kk, pos, sh.T, sh.hd, sh.nq, sh.nk, 10000)
					if halves {
						freq := make([]float32, sh.hd/2)
						for i := range freq {
							freq[i] = accel.RoPEFreq(2*i, sh.hd, 500000)
						}
						c.op = accel.OpRoPETable
						c.o[3] = operand{b: accel.F32Bytes(freq), rows: 1, cols: len(freq), dt: accel.F32}
						c.i[1] = int(accel.RoPEHalves)
					}
					return c
				}
				want := call()
				n, _ := unitsRoPE(want)
				vec.Store(nil)
				runRoPE(want, 0, n, &kctx{})
				for _, vk := range vecSets() {
					vec.Store(vk)
					got := call()
					k := &kctx{}
					for _, cut := range [][2]int{{0, n / 3}, {n / 3, 2 * n / 3}, {2 * n / 3, n}} {
						runRoPE(got, cut[0], cut[1], k)
					}
					for o := 0; o < 2; o++ {
						if j, ok := bitsEqual(got.o[o].f32(), want.o[o].f32()); !ok {
							t.Fatalf("%s: operand %d element %d: %g, plain Go %g", vk.name, o, j, got.o[o].f32()[j], want.o[o].f32()[j])
						}
					}
				}
			})
		}
	}
}
