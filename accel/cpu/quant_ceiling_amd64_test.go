//go:build goexperiment.simd && amd64

package cpu

import (
	"simd/archsimd"
	"testing"
	"unsafe"
)

// The many-row kernels' ceilings: loops of nothing but a kernel's integer
// work per 32 multiply-adds (8 outputs by 4 inputs of one row: one
// "product"), eight independent sums, x loaded from a small buffer, the
// weights in registers. What a kernel adds to these (the weights'
// unpacking, x's broadcasts, the float32 sums per block, the fences) is
// what separates its GMAC/cpu-s (BenchmarkQuantRows) from theirs.
//   - q8_0-floor: VPMADDUBSW, VPMADDWD, VPADDD. Without VNNI an exact
//     product of signed 8-bit weights and 8-bit x takes these two
//     multiplies per 32 multiply-adds: a pair sum may reach 2·128·127, so
//     two of them cannot be added in int16 before the VPMADDWD.
//   - q8_0-sign: the sign trick's VPSIGNB before them (mmQ8_0x3's work per
//     product, less its broadcasts and unpacking).
//   - q4_0-floor: VPMADDUBSW and an int16 VPADDW: 4-bit weights' pair sums
//     (at most 2·15·127) add in int16 over a block, one multiply per 32.

//go:noinline
//go:norace
//go:nocheckptr
func ceilQ8Floor(n int, a, ones, x unsafe.Pointer, out *[8]int32) {
	av := archsimd.LoadUint8x32((*[32]uint8)(a))
	ov := archsimd.LoadInt16x16((*[16]int16)(ones))
	var c0, c1, c2, c3, c4, c5, c6, c7 archsimd.Int32x8
	for i := 0; i < n; i++ {
		c0 = c0.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(x))).DotProductPairs(ov))
		c1 = c1.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 32)))).DotProductPairs(ov))
		c2 = c2.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 64)))).DotProductPairs(ov))
		c3 = c3.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 96)))).DotProductPairs(ov))
		c4 = c4.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 128)))).DotProductPairs(ov))
		c5 = c5.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 160)))).DotProductPairs(ov))
		c6 = c6.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 192)))).DotProductPairs(ov))
		c7 = c7.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 224)))).DotProductPairs(ov))
	}
	c0.Add(c1).Add(c2).Add(c3).Add(c4).Add(c5).Add(c6).Add(c7).Store(out)
	archsimd.ClearAVXUpperBits()
}

//go:noinline
//go:norace
//go:nocheckptr
func ceilQ8Sign(n int, w, ones, x unsafe.Pointer, out *[8]int32) {
	wv := archsimd.LoadInt8x32((*[32]int8)(w))
	av := wv.Abs().AsUint8x32()
	ov := archsimd.LoadInt16x16((*[16]int16)(ones))
	var c0, c1, c2, c3, c4, c5, c6, c7 archsimd.Int32x8
	for i := 0; i < n; i++ {
		c0 = c0.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(x)).CopySign(wv)).DotProductPairs(ov))
		c1 = c1.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 32))).CopySign(wv)).DotProductPairs(ov))
		c2 = c2.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 64))).CopySign(wv)).DotProductPairs(ov))
		c3 = c3.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 96))).CopySign(wv)).DotProductPairs(ov))
		c4 = c4.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 128))).CopySign(wv)).DotProductPairs(ov))
		c5 = c5.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 160))).CopySign(wv)).DotProductPairs(ov))
		c6 = c6.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 192))).CopySign(wv)).DotProductPairs(ov))
		c7 = c7.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 224))).CopySign(wv)).DotProductPairs(ov))
	}
	c0.Add(c1).Add(c2).Add(c3).Add(c4).Add(c5).Add(c6).Add(c7).Store(out)
	archsimd.ClearAVXUpperBits()
}

//go:noinline
//go:norace
//go:nocheckptr
func ceilQ4Floor(n int, a, x unsafe.Pointer, out *[16]int16) {
	av := archsimd.LoadUint8x32((*[32]uint8)(a))
	var c0, c1, c2, c3, c4, c5, c6, c7 archsimd.Int16x16
	for i := 0; i < n; i++ {
		c0 = c0.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(x))))
		c1 = c1.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 32)))))
		c2 = c2.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 64)))))
		c3 = c3.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 96)))))
		c4 = c4.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 128)))))
		c5 = c5.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 160)))))
		c6 = c6.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 192)))))
		c7 = c7.Add(av.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(x, 224)))))
	}
	c0.Add(c1).Add(c2).Add(c3).Add(c4).Add(c5).Add(c6).Add(c7).Store(out)
	archsimd.ClearAVXUpperBits()
}

// BenchmarkQuantCeiling times the loops above, GMAC per CPU second as
// BenchmarkQuantRows reports it (32 multiply-adds per product).
// `GOEXPERIMENT=simd go test -run XXX -bench QuantCeiling ./accel/cpu`
func BenchmarkQuantCeiling(b *testing.B) {
	if !quantVecBuilt {
		b.Skip("no quantized vector kernels here")
	}
	var w, x [256]int8
	for i := range x {
		x[i] = int8(i*7 - 100)
	}
	for i := range w[:32] {
		w[i] = int8(i*9 - 128)
	}
	const n = 1 << 16
	var o32 [8]int32
	var o16 [16]int16
	wp, xp, op := unsafe.Pointer(&w[0]), unsafe.Pointer(&x[0]), unsafe.Pointer(&q16Ones[0])
	for _, tc := range []struct {
		name string
		run  func()
	}{
		{"q8_0-floor", func() { ceilQ8Floor(n, wp, op, xp, &o32) }},
		{"q8_0-sign", func() { ceilQ8Sign(n, wp, op, xp, &o32) }},
		{"q4_0-floor", func() { ceilQ4Floor(n, wp, xp, &o16) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				tc.run()
			}
			if c := processCPU() - cpu0; c > 0 {
				b.ReportMetric(float64(8*32*n)*float64(b.N)/c.Seconds()/1e9, "GMAC/cpu-s")
			}
		})
	}
}
