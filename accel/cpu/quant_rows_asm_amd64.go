//go:build goexperiment.simd && amd64

package cpu

import "unsafe"

// mmQ8_0x3: 3 rows by one Q8_0 panel, in Go assembly
// (quant_rows_asm_amd64.s), the bits of gen_quantrows.go's archsimd
// kernels. Compiled from archsimd, the same work per group broadcast x
// from a general register (VMOVD, then VPBROADCASTD) where assembly
// broadcasts from memory, reloaded q8Flip and q16Ones every group (loaded
// once per call here) and stored a fence every group to keep the
// compiler's schedule in source order. On a 2-core AMD EPYC (Zen 3) the
// many-row Q8_0 benchmarks ran 15-45% faster with it, a 110M Q8_0 model's
// 64-sequence step 10-18% (docs/BENCH.md, "A 2-core AMD EPYC (Zen 3) VM,
// the third time").
//
//go:noescape
func mmQ8_0x3(y unsafe.Pointer, ys uintptr, qx unsafe.Pointer, xs uintptr, dx, sx unsafe.Pointer, ds, ss uintptr, w unsafe.Pointer, nb int)
