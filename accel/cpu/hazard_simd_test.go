//go:build goexperiment.simd && amd64

package cpu

import (
	"simd/archsimd"
	"unsafe"
)

// mmF32R1P4Uncleared is mmF32R1P4 without the ClearAVXUpperBits on return:
// the hazard, kept for BenchmarkScalarAfterVector to show what it costs.
//
//go:noinline
//go:norace
//go:nocheckptr
func mmF32R1P4Uncleared(y unsafe.Pointer, ys uintptr, x unsafe.Pointer, xs uintptr, w unsafe.Pointer, ps uintptr, in int, _ uintptr) {
	var a0, a1, a2, a3 archsimd.Float32x16
	w1 := unsafe.Add(w, ps)
	w2 := unsafe.Add(w1, ps)
	w3 := unsafe.Add(w2, ps)
	for i := 0; i < in; i++ {
		o := uintptr(i) * 64
		b := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(x, uintptr(i)*4)))
		a0 = a0.Add(b.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(w, o)))))
		a1 = a1.Add(b.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(w1, o)))))
		a2 = a2.Add(b.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(w2, o)))))
		a3 = a3.Add(b.Mul(archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(w3, o)))))
	}
	a0.Store((*[16]float32)(y))
	a1.Store((*[16]float32)(unsafe.Add(y, 64)))
	a2.Store((*[16]float32)(unsafe.Add(y, 128)))
	a3.Store((*[16]float32)(unsafe.Add(y, 192)))
}

func init() { unclearedKernel = mmF32R1P4Uncleared }
