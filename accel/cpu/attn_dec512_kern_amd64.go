//go:build goexperiment.simd && amd64

package cpu

import (
	"simd/archsimd"
	"unsafe"
)

// The kernels of the AVX-512 decode path (attn_dec512_amd64.go). Each lane
// is one of the reference's chains: a score sums its rounded products over
// the head in element order from zero and divides by the scale; a weighted
// sum adds each position's rounded product in position order.

// decT16 holds the indices of scoresDec16's 16x16 transpose
// (attn_dec512_amd64.s): round k swaps bit k of the row (the vector) with
// bit k of the column (the lane), pairing vectors x and y that differ in
// that bit. [k][0] makes the new x from (x, y), [k][1] the new y from (y,
// x): indices of 16 and over pick from the second.
var decT16 [4][2][16]uint32

func init() {
	for k := 0; k < 4; k++ {
		bk := 1 << k
		for l := 0; l < 16; l++ {
			if l&bk == 0 {
				decT16[k][0][l] = uint32(l)             // x's own
				decT16[k][1][l] = uint32(16 + (l | bk)) // x's, shifted up
			} else {
				decT16[k][0][l] = uint32(16 + (l ^ bk)) // y's, shifted down
				decT16[k][1][l] = uint32(l)             // y's own
			}
		}
	}
}

// scoresDec16 sets att[p] = (sum over i < hd in order of q[i]*k_p[i]) /
// scale for nb blocks of sixteen positions (offs[:16*nb]), lane j of a
// block being position p+j, k_p the hd floats (a multiple of sixteen) at
// kc + 4*offs[p]. A block's rows are loaded sixteen elements at a time and
// transposed in registers, each column then one step of the sixteen
// chains: a product rounded, then added. Go assembly
// (attn_dec512_amd64.s): the transpose holds sixteen rows and eight
// tables, which archsimd's sixteen registers spilled.
//
//go:noescape
func scoresDec16(att, kc unsafe.Pointer, offs *int, nb int, q unsafe.Pointer, hd int, scale float32)

// scoresDec16h is scoresDec16 over an F16 cache: kc and offs in binary16
// elements, each row widened as it is loaded (attn_dec512_amd64.s).
//
//go:noescape
func scoresDec16h(att, kc unsafe.Pointer, offs *int, nb int, q unsafe.Pointer, hd int, scale float32)

// vAVDec2x64h is vAVDec2x64 over an F16 cache, for n = len(offs) > 0
// positions (attn_dec512_amd64.s).
//
//go:noescape
func vAVDec2x64h(d0, d1, v0, v1 unsafe.Pointer, offs *int, n int, a0, a1 unsafe.Pointer)

// vAVDec2x64 adds a0[p] * v0_p to d0[:64] and a1[p] * v1_p to d1[:64] for
// every p < len(offs) in order, vX_p the 64 floats at vX + 4*offs[p]: two
// heads' weighted sums (or two halves of one head's), eight chains side
// by side where one head's four would wait on the add's latency.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAVDec2x64(d0, d1, v0, v1 unsafe.Pointer, offs []int, a0, a1 unsafe.Pointer) {
	x0 := archsimd.LoadFloat32x16((*[16]float32)(d0))
	x1 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d0, 64)))
	x2 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d0, 128)))
	x3 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d0, 192)))
	y0 := archsimd.LoadFloat32x16((*[16]float32)(d1))
	y1 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d1, 64)))
	y2 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d1, 128)))
	y3 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d1, 192)))
	for _, o := range offs {
		b0 := archsimd.BroadcastUint32x16(*(*uint32)(a0)).AsFloat32x16()
		b1 := archsimd.BroadcastUint32x16(*(*uint32)(a1)).AsFloat32x16()
		u := unsafe.Add(v0, uintptr(o)*4)
		w := unsafe.Add(v1, uintptr(o)*4)
		x0 = x0.Add(b0.Mul(archsimd.LoadFloat32x16((*[16]float32)(u))))
		y0 = y0.Add(b1.Mul(archsimd.LoadFloat32x16((*[16]float32)(w))))
		x1 = x1.Add(b0.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(u, 64)))))
		y1 = y1.Add(b1.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(w, 64)))))
		x2 = x2.Add(b0.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(u, 128)))))
		y2 = y2.Add(b1.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(w, 128)))))
		x3 = x3.Add(b0.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(u, 192)))))
		y3 = y3.Add(b1.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(w, 192)))))
		a0, a1 = unsafe.Add(a0, 4), unsafe.Add(a1, 4)
	}
	x0.Store((*[16]float32)(d0))
	x1.Store((*[16]float32)(unsafe.Add(d0, 64)))
	x2.Store((*[16]float32)(unsafe.Add(d0, 128)))
	x3.Store((*[16]float32)(unsafe.Add(d0, 192)))
	y0.Store((*[16]float32)(d1))
	y1.Store((*[16]float32)(unsafe.Add(d1, 64)))
	y2.Store((*[16]float32)(unsafe.Add(d1, 128)))
	y3.Store((*[16]float32)(unsafe.Add(d1, 192)))
	archsimd.ClearAVXUpperBits()
}
