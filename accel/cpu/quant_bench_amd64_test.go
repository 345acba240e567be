//go:build goexperiment.simd && amd64

package cpu

import (
	"fmt"
	"math/rand/v2"
	"simd/archsimd"
	"testing"
	"time"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// mmQ4_0Widen is the alternative the quantized kernels were measured
// against (benchmark only): Q4_0 weights widened to float32 in registers
// (nibble, int32, float, less 8, times the block scale) and multiplied with
// float32 x, one sequential float sum per output, on the same packed panels.
//
//go:noinline
//go:norace
//go:nocheckptr
func mmQ4_0Widen(y, x, w unsafe.Pointer, nb int) {
	var acc0, acc1 archsimd.Float32x8
	m0f := archsimd.BroadcastUint32x8(0x0f)
	eight := archsimd.BroadcastFloat32x8(8)
	var shifts [8]archsimd.Uint32x8 // per-lane counts (a constant count stalls: quant_amd64.go)
	for k := range shifts {
		shifts[k] = archsimd.BroadcastUint32x8(uint32(8*(k%4) + 4*(k/4)))
	}
	for b := 0; b < nb; b++ {
		wb := unsafe.Add(w, uintptr(b)*(32+4*64))
		xb := unsafe.Add(x, uintptr(b)*128)
		sc := archsimd.LoadInt16x16((*[16]int16)(wb))
		sh, sl := sc.ShiftAllRight(3).And(archsimd.LoadInt16x16(&f16Hi)), sc.ShiftAllLeft(13)
		d0 := sl.InterleaveLoGrouped(sh).AsFloat32x8().Mul(archsimd.LoadFloat32x8(&f16Scale))
		d1 := sl.InterleaveHiGrouped(sh).AsFloat32x8().Mul(archsimd.LoadFloat32x8(&f16Scale))
		for v := uintptr(0); v < 4; v++ {
			u0 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 32+v*64))).AsUint32x8()
			u1 := archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(wb, 64+v*64))).AsUint32x8()
			for k := 0; k < 8; k++ {
				// byte k%4, low (k < 4: input 4v+k) or high nibble (input 4(v+4)+k-4)
				sh := shifts[k]
				in := 4*v + uintptr(k%4) + 16*uintptr(k/4)
				xv := archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(xb, in*4)))
				q0 := u0.ShiftRight(sh).And(m0f).AsInt32x8().ConvertToFloat32().Sub(eight).Mul(d0)
				q1 := u1.ShiftRight(sh).And(m0f).AsInt32x8().ConvertToFloat32().Sub(eight).Mul(d1)
				acc0 = acc0.Add(xv.Mul(q0))
				acc1 = acc1.Add(xv.Mul(q1))
			}
		}
	}
	acc0.Store((*[8]float32)(y))
	acc1.Store((*[8]float32)(unsafe.Add(y, 32)))
	archsimd.ClearAVXUpperBits()
}

// BenchmarkQuantMatMulKernel times the quantized matmul on one thread for
// the 25M and 110M models' shapes (in x out) at T rows (1: batch-1 decode,
// 16 and 64: batched decode, 512: prefill): the AVX2 integer kernels on
// packed panels (8-bit x), the plain-Go kernels on ggml's blocks, and, for
// Q4_0, the weights widened to float32 in registers (mmQ4_0Widen). GMAC/s
// counts one multiply-add per weight and row; x's quantization is included
// where it is needed; GMAC/cpu-s divides by the process's CPU time instead
// of the wall time (steadier on a shared machine).
func BenchmarkQuantMatMulKernel(b *testing.B) {
	if !quantVecBuilt {
		b.Skip("no quantized vector kernels here")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, sh := range [][2]int{{512, 512}, {512, 1376}, {1376, 512}, {768, 2048}, {2048, 768}} {
		for _, T := range []int{1, 16, 64, 512} {
			for _, dt := range quantDTypes {
				in, out := sh[0], sh[1]
				if in%dt.BlockSize() != 0 {
					continue
				}
				c, _, _ := quantCall(b, r, dt, T, out, in)
				p := packWeights(c.o[2])
				k := &kctx{}
				units := (out + panelWidth - 1) / panelWidth
				var cpu0 time.Duration
				report := func(b *testing.B) {
					b.ReportMetric(float64(T*in*out)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
					if c := processCPU() - cpu0; c > 0 {
						// per CPU second: robust to a shared machine's load
						b.ReportMetric(float64(T*in*out)*float64(b.N)/c.Seconds()/1e9, "GMAC/cpu-s")
					}
				}
				b.Run(fmt.Sprintf("%s/%dx%d/T%d/int-avx2", dt, in, out, T), func(b *testing.B) {
					cpu0 = processCPU()
					for i := 0; i < b.N; i++ {
						quantizeActs(&k.qa, c.o[1].f32(), in, 0, T, kBlocks(dt))
						runMatMulQuantVec(c, &k.qa, p, 0, units, 0, T, k)
					}
					report(b)
				})
				b.Run(fmt.Sprintf("%s/%dx%d/T%d/int-go", dt, in, out, T), func(b *testing.B) {
					old := quantVec.Load()
					quantVec.Store(false)
					defer quantVec.Store(old)
					cpu0 = processCPU()
					for i := 0; i < b.N; i++ {
						runMatMulQuant(c, 0, units, 0, T, k)
					}
					report(b)
				})
				if dt != accel.Q4_0 {
					continue
				}
				b.Run(fmt.Sprintf("%s/%dx%d/T%d/widen-avx2", dt, in, out, T), func(b *testing.B) {
					x, y := c.o[1].f32(), c.o[0].f32()
					cpu0 = processCPU()
					for i := 0; i < b.N; i++ {
						for t := 0; t < T; t++ {
							for pn := 0; pn < out/panelWidth; pn++ {
								mmQ4_0Widen(unsafe.Pointer(&y[t*out+pn*panelWidth]), unsafe.Pointer(&x[t*in]), p.panel(pn), in/32)
							}
						}
					}
					report(b)
				})
			}
			in, out := sh[0], sh[1]
			b.Run(fmt.Sprintf("f32/%dx%d/T%d/go", in, out, T), func(b *testing.B) {
				c := matCall(r, accel.F32, T, out, in)
				for i := 0; i < b.N; i++ {
					runMatMulRows(c, 0, (out+matBlock-1)/matBlock, 0, T)
				}
				b.ReportMetric(float64(T*in*out)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}
