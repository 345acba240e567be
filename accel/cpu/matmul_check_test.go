package cpu

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// TestMatMulPackedChecksOperands: the packed vector kernels (the AVX2
// float32 ones in assembly, the rest archsimd) read x and W's panels and
// write y through raw pointers, so runMatMulPacked must hold the operands
// to the rows, inputs and panels the kernels will touch: a call whose x or
// y is shorter than its shape, whose pack is short, or whose pack is of
// another input count panics (as the plain-Go kernels' slicing does)
// instead of reading or writing past the operands. Each short slice keeps
// its capacity here, so a kernel that does run past it stays in memory the
// test owns.
func TestMatMulPackedChecksOperands(t *testing.T) {
	var sets []*vecOps
	for _, vk := range vecSets() {
		if vk.hasMM() {
			sets = append(sets, vk)
		}
	}
	if len(sets) == 0 {
		t.Skip("no packed vector matmul kernels in this build or on this CPU")
	}
	old := vec.Load()
	defer vec.Store(old)
	r := rand.New(rand.NewPCG(31, 32))
	const T, out, in = 3, 32, 16
	cases := []struct {
		name   string
		mangle func(c *rcall, p *packed) *packed
	}{
		{"x short", func(c *rcall, p *packed) *packed { c.o[1].b = c.o[1].b[:len(c.o[1].b)-4]; return p }},
		{"y short", func(c *rcall, p *packed) *packed { c.o[0].b = c.o[0].b[:len(c.o[0].b)-4]; return p }},
		{"pack short", func(c *rcall, p *packed) *packed { q := *p; q.data = q.data[:len(q.data)-64]; return &q }},
		{"pack of other inputs", func(c *rcall, p *packed) *packed {
			w := c.o[2]
			w.cols, w.rows = in/2, 2*out // the same bytes as [out, in]
			return packWeights(w)
		}},
	}
	for _, set := range sets {
		vec.Store(set)
		for _, dt := range []accel.DType{accel.F32, accel.BF16} {
			for _, tc := range cases {
				t.Run(fmt.Sprintf("%s/%s/%s", set.name, dt, tc.name), func(t *testing.T) {
					c := matCall(r, dt, T, out, in)
					p := tc.mangle(c, packWeights(c.o[2]))
					defer func() {
						e := recover()
						if e == nil {
							t.Fatal("runMatMulPacked ran its kernels on operands that do not hold their shapes")
						}
						if err, ok := e.(error); !ok || !strings.HasPrefix(err.Error(), "cpu: matmul") {
							t.Fatalf("panicked with %v, want kernelSpan's error", e)
						}
					}()
					runMatMulPacked(c, p, 0, out/panelWidth, 0, T, &kctx{})
				})
			}
		}
	}
}
