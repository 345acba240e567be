//go:build goexperiment.simd && amd64

package cpu

import (
	"simd/archsimd"
	"unsafe"
)

// The AVX-512 set's kernels of the prefill attention path (attn_runs.go):
// the AVX2 set's vScoresT and vAVRows8Go's kernels on sixteen lanes. Each
// lane is still its own chain in the reference's order (a score: products
// of the head's elements rounded, then added in element order from zero,
// then divided by the scale; a weighted sum: each element adds its
// positions' rounded products in position order), so the bits are the
// plain-Go kernels' and the AVX2 set's; only more chains run side by side.

// vScoresT16Go is scoresT on sixteen lanes: blocks of sixteen positions,
// the last block of eight where len(att) is an odd multiple of eight.
func vScoresT16Go(att, kt []float32, width int, q []float32, scale float32) {
	hd, n := len(q), len(att)
	if n == 0 || hd == 0 {
		return
	}
	if n%8 != 0 || n > width || (hd-1)*width+n > len(kt) {
		panic("cpu: attention scores: transposed keys out of range")
	}
	vScoresT16(unsafe.Pointer(&att[0]), unsafe.Pointer(&kt[0]), uintptr(width)*4, unsafe.Pointer(&q[0]), hd, n/16, n%16 != 0, scale)
}

// vScoresT16 computes nb blocks of sixteen scores (lane j of block b is
// position 16b+j) and, where half, eight more after them: each lane sums
// its products over the head's elements in order from zero, a separate
// multiply and add (the reference's chain), then divides by scale. Three
// blocks run side by side (a panel of attnPanel positions is three), then
// one: enough chains to hide the add's latency on both add pipes. The
// loops keep the form of vScoresT's (gen_avx2mm.go's, the test at the
// bottom), under which the compiler schedules in source order.
//
//go:noinline
//go:norace
//go:nocheckptr
func vScoresT16(att, kt unsafe.Pointer, rs uintptr, q unsafe.Pointer, hd, nb int, half bool, scale float32) {
	sv := archsimd.BroadcastFloat32x16(scale)
	b := 0
	for ; b+3 <= nb; b += 3 {
		var a0, a1, a2 archsimd.Float32x16
		kp, qp := unsafe.Add(kt, b*64), q
		for i := 0; ; {
			qv := archsimd.BroadcastUint32x16(*(*uint32)(qp)).AsFloat32x16()
			a0 = a0.Add(qv.Mul(archsimd.LoadFloat32x16((*[16]float32)(kp))))
			a1 = a1.Add(qv.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(kp, 64)))))
			a2 = a2.Add(qv.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(kp, 128)))))
			i++
			if i >= hd {
				break
			}
			kp, qp = unsafe.Add(kp, rs), unsafe.Add(qp, 4)
		}
		o := unsafe.Add(att, b*64)
		a0.Div(sv).Store((*[16]float32)(o))
		a1.Div(sv).Store((*[16]float32)(unsafe.Add(o, 64)))
		a2.Div(sv).Store((*[16]float32)(unsafe.Add(o, 128)))
	}
	for ; b < nb; b++ {
		var a0 archsimd.Float32x16
		kp, qp := unsafe.Add(kt, b*64), q
		for i := 0; ; {
			qv := archsimd.BroadcastUint32x16(*(*uint32)(qp)).AsFloat32x16()
			a0 = a0.Add(qv.Mul(archsimd.LoadFloat32x16((*[16]float32)(kp))))
			i++
			if i >= hd {
				break
			}
			kp, qp = unsafe.Add(kp, rs), unsafe.Add(qp, 4)
		}
		a0.Div(sv).Store((*[16]float32)(unsafe.Add(att, b*64)))
	}
	if half {
		s8 := archsimd.BroadcastFloat32x8(scale)
		var a0 archsimd.Float32x8
		kp, qp := unsafe.Add(kt, nb*64), q
		for i := 0; ; {
			qv := archsimd.BroadcastUint32x8(*(*uint32)(qp)).AsFloat32x8()
			a0 = a0.Add(qv.Mul(archsimd.LoadFloat32x8((*[8]float32)(kp))))
			i++
			if i >= hd {
				break
			}
			kp, qp = unsafe.Add(kp, rs), unsafe.Add(qp, 4)
		}
		a0.Div(s8).Store((*[8]float32)(unsafe.Add(att, nb*64)))
	}
	archsimd.ClearAVXUpperBits()
}

// vScoresT16x2Go is scoresT2 on sixteen lanes.
func vScoresT16x2Go(a0, a1, kt []float32, width int, q0, q1 []float32, scale float32) {
	hd, n := len(q0), len(a0)
	if n == 0 || hd == 0 {
		return
	}
	if n%8 != 0 || n > width || (hd-1)*width+n > len(kt) || len(a1) != n || len(q1) != hd {
		panic("cpu: attention scores: transposed keys out of range")
	}
	// The half block is its own kernel, for vScoresT16x2's registers.
	if n >= 16 {
		vScoresT16x2(unsafe.Pointer(&a0[0]), unsafe.Pointer(&a1[0]), unsafe.Pointer(&kt[0]), uintptr(width)*4,
			unsafe.Pointer(&q0[0]), unsafe.Pointer(&q1[0]), hd, n/16, scale)
	}
	if h := n &^ 15; h < n {
		vScoresT8x2(unsafe.Pointer(&a0[h]), unsafe.Pointer(&a1[h]), unsafe.Pointer(&kt[h]), uintptr(width)*4,
			unsafe.Pointer(&q0[0]), unsafe.Pointer(&q1[0]), hd, scale)
	}
}

// vScoresT16x2 is vScoresT16 for two queries, q0's scores into a0 and
// q1's into a1, each vector of keys loaded once for both: three blocks of
// sixteen positions side by side (six chains, one multiply and one add per
// key load and query), then one (vScoresT8x2 takes a half block). Per key element the
// two queries' broadcasts and three loads feed six products, so the loop
// is bound by the multiply and add pipes rather than by the loads. The
// queries are indexed rather than walked: two more pointers live in the
// loop run the compiler out of general registers, and it spills the loop
// counter (a store and a reload in every iteration's chain).
//
//go:noinline
//go:norace
//go:nocheckptr
func vScoresT16x2(a0, a1, kt unsafe.Pointer, rs uintptr, q0, q1 unsafe.Pointer, hd, nb int, scale float32) {
	sv := archsimd.BroadcastFloat32x16(scale)
	b := 0
	for ; b+3 <= nb; b += 3 {
		var x0, x1, x2, y0, y1, y2 archsimd.Float32x16
		kp := unsafe.Add(kt, b*64)
		for i := 0; ; {
			u := archsimd.BroadcastUint32x16(*(*uint32)(unsafe.Add(q0, i*4))).AsFloat32x16()
			w := archsimd.BroadcastUint32x16(*(*uint32)(unsafe.Add(q1, i*4))).AsFloat32x16()
			k0 := archsimd.LoadFloat32x16((*[16]float32)(kp))
			x0 = x0.Add(u.Mul(k0))
			y0 = y0.Add(w.Mul(k0))
			k1 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(kp, 64)))
			x1 = x1.Add(u.Mul(k1))
			y1 = y1.Add(w.Mul(k1))
			k2 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(kp, 128)))
			x2 = x2.Add(u.Mul(k2))
			y2 = y2.Add(w.Mul(k2))
			i++
			if i >= hd {
				break
			}
			kp = unsafe.Add(kp, rs)
		}
		o0, o1 := unsafe.Add(a0, b*64), unsafe.Add(a1, b*64)
		x0.Div(sv).Store((*[16]float32)(o0))
		x1.Div(sv).Store((*[16]float32)(unsafe.Add(o0, 64)))
		x2.Div(sv).Store((*[16]float32)(unsafe.Add(o0, 128)))
		y0.Div(sv).Store((*[16]float32)(o1))
		y1.Div(sv).Store((*[16]float32)(unsafe.Add(o1, 64)))
		y2.Div(sv).Store((*[16]float32)(unsafe.Add(o1, 128)))
	}
	for ; b < nb; b++ {
		var x0, y0 archsimd.Float32x16
		kp := unsafe.Add(kt, b*64)
		for i := 0; ; {
			u := archsimd.BroadcastUint32x16(*(*uint32)(unsafe.Add(q0, i*4))).AsFloat32x16()
			w := archsimd.BroadcastUint32x16(*(*uint32)(unsafe.Add(q1, i*4))).AsFloat32x16()
			k0 := archsimd.LoadFloat32x16((*[16]float32)(kp))
			x0 = x0.Add(u.Mul(k0))
			y0 = y0.Add(w.Mul(k0))
			i++
			if i >= hd {
				break
			}
			kp = unsafe.Add(kp, rs)
		}
		x0.Div(sv).Store((*[16]float32)(unsafe.Add(a0, b*64)))
		y0.Div(sv).Store((*[16]float32)(unsafe.Add(a1, b*64)))
	}
	archsimd.ClearAVXUpperBits()
}

// vScoresT8x2 is vScoresT16x2's half block: eight positions for two
// queries.
//
//go:noinline
//go:norace
//go:nocheckptr
func vScoresT8x2(a0, a1, kt unsafe.Pointer, rs uintptr, q0, q1 unsafe.Pointer, hd int, scale float32) {
	s8 := archsimd.BroadcastFloat32x8(scale)
	var x0, y0 archsimd.Float32x8
	kp := kt
	for i := 0; ; {
		u := archsimd.BroadcastUint32x8(*(*uint32)(unsafe.Add(q0, i*4))).AsFloat32x8()
		w := archsimd.BroadcastUint32x8(*(*uint32)(unsafe.Add(q1, i*4))).AsFloat32x8()
		k0 := archsimd.LoadFloat32x8((*[8]float32)(kp))
		x0 = x0.Add(u.Mul(k0))
		y0 = y0.Add(w.Mul(k0))
		i++
		if i >= hd {
			break
		}
		kp = unsafe.Add(kp, rs)
	}
	x0.Div(s8).Store((*[8]float32)(a0))
	y0.Div(s8).Store((*[8]float32)(a1))
	archsimd.ClearAVXUpperBits()
}

// vAVRows16Go is avRows on sixteen lanes: the head in pieces of 64
// elements, then 16, then 8; two queries at once where d1 is given, so
// that each row of values is loaded once for both.
func vAVRows16Go(d0, d1, vb, a0, a1 []float32) {
	hd, n := len(d0), len(a0)
	if n == 0 || hd == 0 {
		return
	}
	if hd%8 != 0 || len(vb) < n*hd || (d1 != nil && (len(d1) != hd || len(a1) != n)) {
		panic("cpu: attention values: rows out of range")
	}
	vs := uintptr(hd) * 4
	p0, v, q0 := unsafe.Pointer(&d0[0]), unsafe.Pointer(&vb[0]), unsafe.Pointer(&a0[0])
	for c := 0; c < hd; {
		o := uintptr(c) * 4
		switch {
		case hd-c >= 64 && d1 != nil:
			vAV2x64(unsafe.Add(p0, o), unsafe.Pointer(&d1[c]), unsafe.Add(v, o), vs, q0, unsafe.Pointer(&a1[0]), n)
			c += 64
		case hd-c >= 64:
			vAV1x64(unsafe.Add(p0, o), unsafe.Add(v, o), vs, q0, n)
			c += 64
		case hd-c >= 16 && d1 != nil:
			vAV2x16(unsafe.Add(p0, o), unsafe.Pointer(&d1[c]), unsafe.Add(v, o), vs, q0, unsafe.Pointer(&a1[0]), n)
			c += 16
		case hd-c >= 16:
			vAV1x16(unsafe.Add(p0, o), unsafe.Add(v, o), vs, q0, n)
			c += 16
		case d1 != nil:
			vAV2x8(unsafe.Add(p0, o), unsafe.Pointer(&d1[c]), unsafe.Add(v, o), vs, q0, unsafe.Pointer(&a1[0]), n)
			c += 8
		default:
			vAV1x8(unsafe.Add(p0, o), unsafe.Add(v, o), vs, q0, n)
			c += 8
		}
	}
}

// vAV2x64 adds a0[p] * v_p to d0[:64] and a1[p] * v_p to d1[:64] for p < n
// in order, v_p the 64 floats at v + p*vs: eight chains of sixteen lanes,
// each row loaded once for both queries. The loop keeps vAV2x32's form.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAV2x64(d0, d1, v unsafe.Pointer, vs uintptr, a0, a1 unsafe.Pointer, n int) {
	x0 := archsimd.LoadFloat32x16((*[16]float32)(d0))
	x1 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d0, 64)))
	x2 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d0, 128)))
	x3 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d0, 192)))
	y0 := archsimd.LoadFloat32x16((*[16]float32)(d1))
	y1 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d1, 64)))
	y2 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d1, 128)))
	y3 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d1, 192)))
	for p := 0; ; {
		b0 := archsimd.BroadcastUint32x16(*(*uint32)(a0)).AsFloat32x16()
		b1 := archsimd.BroadcastUint32x16(*(*uint32)(a1)).AsFloat32x16()
		v0 := archsimd.LoadFloat32x16((*[16]float32)(v))
		x0 = x0.Add(b0.Mul(v0))
		y0 = y0.Add(b1.Mul(v0))
		v1 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(v, 64)))
		x1 = x1.Add(b0.Mul(v1))
		y1 = y1.Add(b1.Mul(v1))
		v2 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(v, 128)))
		x2 = x2.Add(b0.Mul(v2))
		y2 = y2.Add(b1.Mul(v2))
		v3 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(v, 192)))
		x3 = x3.Add(b0.Mul(v3))
		y3 = y3.Add(b1.Mul(v3))
		p++
		if p >= n {
			break
		}
		v, a0, a1 = unsafe.Add(v, vs), unsafe.Add(a0, 4), unsafe.Add(a1, 4)
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

// vAV1x64 is vAV2x64 for one query.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAV1x64(d0, v unsafe.Pointer, vs uintptr, a0 unsafe.Pointer, n int) {
	x0 := archsimd.LoadFloat32x16((*[16]float32)(d0))
	x1 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d0, 64)))
	x2 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d0, 128)))
	x3 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(d0, 192)))
	for p := 0; ; {
		b0 := archsimd.BroadcastUint32x16(*(*uint32)(a0)).AsFloat32x16()
		x0 = x0.Add(b0.Mul(archsimd.LoadFloat32x16((*[16]float32)(v))))
		x1 = x1.Add(b0.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(v, 64)))))
		x2 = x2.Add(b0.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(v, 128)))))
		x3 = x3.Add(b0.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(v, 192)))))
		p++
		if p >= n {
			break
		}
		v, a0 = unsafe.Add(v, vs), unsafe.Add(a0, 4)
	}
	x0.Store((*[16]float32)(d0))
	x1.Store((*[16]float32)(unsafe.Add(d0, 64)))
	x2.Store((*[16]float32)(unsafe.Add(d0, 128)))
	x3.Store((*[16]float32)(unsafe.Add(d0, 192)))
	archsimd.ClearAVXUpperBits()
}

// vAV2x16 is vAV2x64 for sixteen elements.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAV2x16(d0, d1, v unsafe.Pointer, vs uintptr, a0, a1 unsafe.Pointer, n int) {
	x0 := archsimd.LoadFloat32x16((*[16]float32)(d0))
	y0 := archsimd.LoadFloat32x16((*[16]float32)(d1))
	for p := 0; ; {
		b0 := archsimd.BroadcastUint32x16(*(*uint32)(a0)).AsFloat32x16()
		b1 := archsimd.BroadcastUint32x16(*(*uint32)(a1)).AsFloat32x16()
		v0 := archsimd.LoadFloat32x16((*[16]float32)(v))
		x0 = x0.Add(b0.Mul(v0))
		y0 = y0.Add(b1.Mul(v0))
		p++
		if p >= n {
			break
		}
		v, a0, a1 = unsafe.Add(v, vs), unsafe.Add(a0, 4), unsafe.Add(a1, 4)
	}
	x0.Store((*[16]float32)(d0))
	y0.Store((*[16]float32)(d1))
	archsimd.ClearAVXUpperBits()
}

// vAV1x16 is vAV2x64 for one query and sixteen elements.
//
//go:noinline
//go:norace
//go:nocheckptr
func vAV1x16(d0, v unsafe.Pointer, vs uintptr, a0 unsafe.Pointer, n int) {
	x0 := archsimd.LoadFloat32x16((*[16]float32)(d0))
	for p := 0; ; {
		b0 := archsimd.BroadcastUint32x16(*(*uint32)(a0)).AsFloat32x16()
		x0 = x0.Add(b0.Mul(archsimd.LoadFloat32x16((*[16]float32)(v))))
		p++
		if p >= n {
			break
		}
		v, a0 = unsafe.Add(v, vs), unsafe.Add(a0, 4)
	}
	x0.Store((*[16]float32)(d0))
	archsimd.ClearAVXUpperBits()
}
