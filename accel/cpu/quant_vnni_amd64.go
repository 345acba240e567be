//go:build goexperiment.simd && amd64

package cpu

//go:generate go run gen_quantvnni.go

import (
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// The AVX-512 VNNI quantized kernels (gen_quantvnni.go, in assembly): the
// avx512 kernel set's for Q8_0 and Q4_0 where the CPU has AVX512_VNNI
// (avx512Ops); the other types, and every type in the avx2 set, run the
// AVX2 kernels of quant_amd64.go and quant_rows_amd64.go. The same bits
// either way (gen_quantvnni.go says why).
//
// One kernel serves every row count from 1 to vnniRows (one-row decode,
// batched decode, prefill): the rows of a piece are cut into groups of as
// equal sizes as vnniRows allows, and each group is one call per panel.
// x is interleaved for them once per matmul (vnniInterleave): one
// pointer then reaches a block's data of every row of the group.

// qKernelV is a VNNI kernel: R rows of interleaved x (vnniInterleave's
// group) times one panel over nb blocks into 16 float32 per row at y +
// r·ys.
type qKernelV func(y unsafe.Pointer, ys uintptr, x, w unsafe.Pointer, nb int)

// quantOps is a kernel set's own quantized kernels, where it has any
// beyond the AVX2 ones (vecOps.quant; nil: the AVX2 kernels).
type quantOps struct {
	q8_0, q4_0 *[vnniRows]qKernelV
}

// vnniQuant is the avx512 set's on a CPU with AVX512_VNNI.
var vnniQuant = &quantOps{q8_0: &vnniQ8_0Kernels, q4_0: &vnniQ4_0Kernels}

// kernels is q's kernels for dt, nil where it has none.
func (q *quantOps) kernels(dt accel.DType) *[vnniRows]qKernelV {
	if q == nil {
		return nil
	}
	switch dt {
	case accel.Q8_0:
		return q.q8_0
	case accel.Q4_0:
		return q.q4_0
	}
	return nil
}

// vnniBlock is the interleaved bytes of one block of 32 inputs of one row:
// the 32 values, the scale and the correction.
const vnniBlock = 40

// vnniGroup is the rows of group g when n rows are cut into ng groups:
// the first n%ng one more than the others.
func vnniGroup(n, ng, g int) int {
	r := n / ng
	if g < n%ng {
		r++
	}
	return r
}

// vnniCorr is the correction per unit of Σx a kernel starts each block's
// int32 sum at: Q8_0's panels hold w+128, Q4_0's nibbles w+8.
func vnniCorr(dt accel.DType) int32 {
	if dt == accel.Q8_0 {
		return -128
	}
	return -8
}

// vnniInterleave writes rows [0, n) of a's quantized x (Q8_0 numerics, nb
// blocks per row) into a.xs for the kernels, cut into ng groups
// (vnniGroup): group g's R rows start at vnniBlock·nb times the rows
// before it, and block b of the group at vnniBlock·R·b from there holds
// the R rows' 32 values (row r at 32r), their scales (float32 at 32R +
// 4r) and their corrections (int32 at 36R + 4r: corr·Σx).
//
//go:norace
func vnniInterleave(a *qacts, n, nb int, corr int32) {
	a.xs = grow(a.xs, vnniBlock*n*nb)
	ng := (n + vnniRows - 1) / vnniRows
	xs := unsafe.Pointer(&a.xs[0])
	r0 := 0
	for g := 0; g < ng; g++ {
		R := vnniGroup(n, ng, g)
		for b := 0; b < nb; b++ {
			o := unsafe.Add(xs, vnniBlock*(r0*nb+R*b))
			for r := 0; r < R; r++ {
				i := (r0+r)*nb + b
				copy(unsafe.Slice((*int8)(unsafe.Add(o, 32*r)), 32), a.qx[32*i:32*i+32])
				*(*float32)(unsafe.Add(o, 32*R+4*r)) = a.dx[i]
				*(*int32)(unsafe.Add(o, 36*R+4*r)) = corr * a.sx[i]
			}
		}
		r0 += R
	}
}

// runQuantVNNI is runMatMulQuantVec on the VNNI kernels ks.
//
//go:norace
func runQuantVNNI(c *rcall, a *qacts, p *packed, ks *[vnniRows]qKernelV, lo, hi, t0, t1 int, k *kctx) {
	y := c.o[0]
	in, out := c.o[1].cols, y.cols
	nb := in / 32
	n := t1 - t0
	ng := (n + vnniRows - 1) / vnniRows
	if !(k.reuseActs && a.xsFor == p.dt && a.xsVNNI) {
		// (Kept for a next matmul of this type that reuses this
		// quantization, as the AVX2 kernels' spread x.)
		a.xsFor, a.xsVNNI = p.dt, true
		vnniInterleave(a, n, nb, vnniCorr(p.dt))
	}
	a.vtail = grow(a.vtail, vnniRows*panelWidth)
	yf := y.f32()
	ys := uintptr(out) * 4
	xs := unsafe.Pointer(&a.xs[0])
	// Panel by panel, so that a panel's weights stay in the nearest cache
	// for every group of rows.
	for pn := lo; pn < hi; pn++ {
		o0 := pn * panelWidth
		wp := p.panel(pn)
		r0 := 0
		for g := 0; g < ng; g++ {
			R := vnniGroup(n, ng, g)
			xg := unsafe.Add(xs, vnniBlock*r0*nb)
			if o0+panelWidth <= out {
				ks[R-1](unsafe.Pointer(&yf[(t0+r0)*out+o0]), ys, xg, wp, nb)
			} else {
				ks[R-1](unsafe.Pointer(&a.vtail[0]), panelWidth*4, xg, wp, nb)
				for i := 0; i < R; i++ {
					t := t0 + r0 + i
					copyF32(yf[t*out+o0:(t+1)*out], a.vtail[i*panelWidth:i*panelWidth+out-o0])
				}
			}
			r0 += R
		}
	}
}

// quantKernels is v's own quantized kernels for dt (nil: the AVX2 ones;
// v nil is the plain-Go set, whose quantized matmul still runs the AVX2
// kernels where quantVec is on, as the tests do).
func (v *vecOps) quantKernels(dt accel.DType) *[vnniRows]qKernelV {
	if v == nil {
		return nil
	}
	return v.quant.kernels(dt)
}
