//go:build goexperiment.simd && amd64

package cpu

//go:generate go run gen_quantvnni.go

import (
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// The AVX-512 VNNI quantized kernels (gen_quantvnni.go, in assembly): the
// avx512 kernel set's where the CPU has AVX512_VNNI (avx512Ops); the avx2
// set runs the AVX2 kernels of quant_amd64.go and quant_rows_amd64.go.
// The same bits either way (gen_quantvnni.go says why).
//
// One kernel per row count serves every row count from 1 to its most (12
// for Q8_0 and Q4_0, 8 for the K-quants): one-row decode, batched decode
// and prefill, all on the packed panels (the AVX2 kernels' widened panels,
// quantWide, are not used). The rows of a piece are cut into groups of as
// equal sizes as that allows, and each group is one call per panel.
// x is interleaved for them once per matmul (vnniInterleave): one
// pointer then reaches a block's data of every row of the group.

// qKernelV is a VNNI kernel: R rows of interleaved x (vnniInterleave's
// group) times one panel over nb blocks into 16 float32 per row at y +
// r·ys, prefetching the lines pf bytes past those of the panel it reads.
type qKernelV func(y unsafe.Pointer, ys uintptr, x, w unsafe.Pointer, nb int, pf uintptr)

// quantOps is a kernel set's own quantized kernels, where it has any
// beyond the AVX2 ones (vecOps.quant; nil: the AVX2 kernels): per type,
// the kernels by rows (index R-1), nil where the type has none.
type quantOps struct {
	q8_0, q4_0, q4_k, q6_k []qKernelV
}

// vnniQuant is the avx512 set's on a CPU with AVX512_VNNI.
var vnniQuant = &quantOps{q8_0: vnniQ8_0Kernels, q4_0: vnniQ4_0Kernels, q4_k: vnniQ4_KKernels, q6_k: vnniQ6_KKernels}

// kernels is q's kernels for dt, nil where it has none.
func (q *quantOps) kernels(dt accel.DType) []qKernelV {
	if q == nil {
		return nil
	}
	switch dt {
	case accel.Q8_0:
		return q.q8_0
	case accel.Q4_0:
		return q.q4_0
	case accel.Q4_K:
		return q.q4_k
	case accel.Q6_K:
		return q.q6_k
	}
	return nil
}

// vnniExtra is the bytes per block and row that dt's kernels read beside
// the values and the scale (vnniInterleave).
func vnniExtra(dt accel.DType) int {
	switch dt {
	case accel.Q4_K:
		return 16 // four pairs of sub-block sums
	case accel.Q6_K:
		return 64 // sixteen corrections
	}
	return 4 // one correction
}

// vnniGroup is the rows of group g when n rows are cut into ng groups:
// the first n%ng one more than the others.
func vnniGroup(n, ng, g int) int {
	r := n / ng
	if g < n%ng {
		r++
	}
	return r
}

// vnniInterleave writes rows [0, n) of a's quantized x (nb blocks of bl
// values per row: dt's numerics) into a.xs for dt's kernels, cut into ng
// groups (vnniGroup). With rb = bl + 4 + vnniExtra(dt), group g's R rows
// start at rb·nb times the rows before it, and block b of the group at
// rb·R·b from there holds the R rows' bl values (row r at bl·r), their
// scales (float32 at bl·R + 4r), then at (bl+4)·R + r·vnniExtra:
//   - Q8_0, Q4_0: the correction -128·Σx or -8·Σx (int32): Q8_0's panels
//     hold w+128, Q4_0's nibbles w+8;
//   - Q4_K: for k < 4 an int32 of sub-block 2k's sum in its low 16 bits
//     and 2k+1's in its high (|Σx| <= 32·128 fits);
//   - Q6_K: for each sub-block of 16 the correction -31·Σx (the panel's
//     values are 63-q).
//
//go:norace
func vnniInterleave(a *qacts, dt accel.DType, n, nb, ng int) {
	bl := dt.BlockSize()
	e := vnniExtra(dt)
	rb := bl + 4 + e
	a.xs = grow(a.xs, rb*n*nb)
	xs := unsafe.Pointer(&a.xs[0])
	r0 := 0
	for g := 0; g < ng; g++ {
		R := vnniGroup(n, ng, g)
		for b := 0; b < nb; b++ {
			o := unsafe.Add(xs, rb*(r0*nb+R*b))
			for r := 0; r < R; r++ {
				i := (r0+r)*nb + b
				copy(unsafe.Slice((*int8)(unsafe.Add(o, bl*r)), bl), a.qx[bl*i:bl*i+bl])
				*(*float32)(unsafe.Add(o, bl*R+4*r)) = a.dx[i]
				ex := unsafe.Add(o, (bl+4)*R+e*r)
				switch dt {
				case accel.Q8_0:
					*(*int32)(ex) = -128 * a.sx[i]
				case accel.Q4_0:
					*(*int32)(ex) = -8 * a.sx[i]
				case accel.Q4_K:
					sx := a.sx[16*i : 16*i+16]
					for k := 0; k < 4; k++ {
						s0, s1 := sx[4*k]+sx[4*k+1], sx[4*k+2]+sx[4*k+3]
						*(*uint32)(unsafe.Add(ex, 4*k)) = uint32(uint16(s0)) | uint32(s1)<<16
					}
				case accel.Q6_K:
					for s, v := range a.sx[16*i : 16*i+16] {
						*(*int32)(unsafe.Add(ex, 4*s)) = -31 * v
					}
				}
			}
		}
		r0 += R
	}
}

// runQuantVNNI is runMatMulQuantVec on the VNNI kernels ks.
//
//go:norace
func runQuantVNNI(c *rcall, a *qacts, p *packed, ks []qKernelV, lo, hi, t0, t1 int, k *kctx) {
	y := c.o[0]
	in, out := c.o[1].cols, y.cols
	bl := p.dt.BlockSize()
	nb := in / bl
	rb := bl + 4 + vnniExtra(p.dt)
	n := t1 - t0
	ng := (n + len(ks) - 1) / len(ks)
	if !(k.reuseActs && a.xsFor == p.dt && a.xsVNNI) {
		// (Kept for a next matmul of this type that reuses this
		// quantization, as the AVX2 kernels' spread x.)
		a.xsFor, a.xsVNNI = p.dt, true
		vnniInterleave(a, p.dt, n, nb, ng)
	}
	if len(ks) > len(k.tail)/panelWidth {
		panic("cpu: VNNI kernels of more rows than kctx.tail holds")
	}
	yf := y.f32()
	ys := uintptr(out) * 4
	xs := unsafe.Pointer(&a.xs[0])
	// Each call prefetches the next panel's lines as it reads its own
	// (gen_quantvnni.go's prefetch): the first group's call waits on its
	// panel no longer than on the one it prefetched. The others' prefetches
	// find the lines cached. Past the last panel they fetch nothing that
	// matters (a prefetch does not fault). Where the weights stream from
	// memory the prefetch is slower (prefetch.go): pf 0 has each call
	// prefetch the lines it is about to load, which costs nothing more.
	pf := p.ps
	if !k.d.prefetchPanels() {
		pf = 0
	}
	// Panel by panel, so that a panel's weights stay in the nearest cache
	// for every group of rows.
	for pn := lo; pn < hi; pn++ {
		o0 := pn * panelWidth
		wp := p.panel(pn)
		r0 := 0
		for g := 0; g < ng; g++ {
			R := vnniGroup(n, ng, g)
			xg := unsafe.Add(xs, rb*r0*nb)
			if o0+panelWidth <= out {
				ks[R-1](unsafe.Pointer(&yf[(t0+r0)*out+o0]), ys, xg, wp, nb, pf)
			} else {
				ks[R-1](unsafe.Pointer(&k.tail[0]), panelWidth*4, xg, wp, nb, pf)
				for i := 0; i < R; i++ {
					t := t0 + r0 + i
					copyF32(yf[t*out+o0:(t+1)*out], k.tail[i*panelWidth:i*panelWidth+out-o0])
				}
			}
			r0 += R
		}
	}
}

// quantKernels is v's own quantized kernels for dt (nil: the AVX2 ones;
// v nil is the plain-Go set, whose quantized matmul still runs the AVX2
// kernels where quantVec is on, as the tests do).
func (v *vecOps) quantKernels(dt accel.DType) []qKernelV {
	if v == nil {
		return nil
	}
	return v.quant.kernels(dt)
}
