//go:build goexperiment.simd && amd64 && linux

package cpu

import (
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"testing"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// TestMatMulKernelsStayInOperands: the float32 and bf16 packed vector
// kernels (the AVX2 float32 ones in assembly) read nothing past x or W's
// packed panels and write nothing past y. Each operand is moved to end at
// a page that cannot be read or written, so that a load or store past it
// faults (a panic, with SetPanicOnFault) instead of passing unseen, on
// every block of every set this CPU runs, for one to four rows, a partial
// last panel (17 and 40 outputs) and odd input counts. The results must be
// those of the operands in ordinary memory.
func TestMatMulKernelsStayInOperands(t *testing.T) {
	old := vec.Load()
	defer vec.Store(old)
	r := rand.New(rand.NewPCG(51, 52))
	ran := 0
	for _, set := range vecSets() {
		if !set.hasMM() {
			continue
		}
		for _, dt := range []accel.DType{accel.F32, accel.BF16} {
			for _, sh := range [][3]int{{1, 17, 1}, {2, 40, 3}, {3, 48, 7}, {4, 64, 2}, {3, 17, 64}, {9, 130, 5}, {8, 257, 3}} {
				T, out, in := sh[0], sh[1], sh[2]
				c := matCall(r, dt, T, out, in)
				p := packWeights(c.o[2])
				n, _ := unitsMatMul(c)
				for _, blk := range tableBlocks(set, dt) {
					t.Run(fmt.Sprintf("%s/%s/T%d/out%d/in%d/R%dP%d", set.name, dt, T, out, in, blk[0], blk[1]), func(t *testing.T) {
						ops := *set
						ops.blocks = mmBlocks{f32: blk, bf16: blk, f32Row: [2]int{1, blk[1]}, bf16Row: [2]int{1, blk[1]}}
						vec.Store(&ops)
						run := func(c *rcall, p *packed) {
							p0, p1, t0, t1 := matUnits(c, 0, n)
							runMatMulPacked(c, p, p0, p1, t0, t1, &kctx{})
						}
						run(c, p)
						want := append([]float32(nil), c.o[0].f32()...)
						g := *c
						for _, i := range []int{0, 1} {
							b := guardedBytes(t, len(c.o[i].b))
							copy(b, c.o[i].b)
							g.o[i].b = b
						}
						clear(g.o[0].b)
						gp := *p
						gp.data = guardedBytes(t, len(p.data))
						copy(gp.data, p.data)
						func() {
							defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
							defer func() {
								if e := recover(); e != nil {
									t.Fatalf("a kernel went past x (%d bytes), W's panels (%d) or y (%d): %v", len(g.o[1].b), len(gp.data), len(g.o[0].b), e)
								}
							}()
							run(&g, &gp)
						}()
						got := unsafe.Slice((*float32)(unsafe.Pointer(&g.o[0].b[0])), T*out)
						for i := range want {
							if !sameBits32(got[i], want[i]) {
								t.Fatalf("y[%d] = %g, in ordinary memory %g", i, got[i], want[i])
							}
						}
						ran++
					})
				}
			}
		}
	}
	if ran == 0 {
		t.Skip("no packed vector matmul kernels on this CPU")
	}
}
