package opencl_test

import (
	"math"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	"github.com/reprise-ml/reprise/quant"
)

// k_kv_write_f16 rounds every float32 as quant.FloatToHalf does: each
// binary16 value, the float32 midpoints between neighbours (ties to even)
// and the float32 values either side of them, overflow to infinity,
// subnormals, signed zeros, infinities and NaNs with their payloads. The
// cache is a view starting 2 bytes past a 4-byte boundary (an odd row
// length), so its element offset counts 2-byte elements.
func TestKVWriteF16Rounding(t *testing.T) {
	e := open(t)
	if !e.Dev.Capability().KVCacheF16 {
		t.Fatal("OpenCL device without KVCacheF16")
	}
	var vals []float32
	for h := uint16(0); h < 0x7c00; h++ {
		lo := quant.HalfToFloat(h)
		mid := float32(65520) // halfway from 65504 to 2^16, which rounds to infinity
		if h < 0x7bff {
			mid = float32((float64(lo) + float64(quant.HalfToFloat(h+1))) / 2)
		}
		for _, x := range []float32{lo, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, float32(math.Inf(1)))} {
			vals = append(vals, x, -x)
		}
	}
	for _, b := range []uint32{0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, 0x7fa00000, 0xffffffff, 0x7fbfe000, 0x7f802000} {
		vals = append(vals, math.Float32frombits(b))
	}
	vals = append(vals, 1e30, -1e30, 1e-30, -1e-30, math.MaxFloat32, math.SmallestNonzeroFloat32)
	const kd = 509
	T := (len(vals) + kd - 1) / kd
	vals = append(vals, make([]float32, T*kd-len(vals))...)
	neg := make([]float32, len(vals))
	for i, x := range vals {
		neg[i] = -x
	}
	kbig, vbig := e.Zeros(accel.F16, T+1, kd), e.Zeros(accel.F16, T+1, kd)
	kc, vc := kbig.RowSlice(1, T+1), vbig.RowSlice(1, T+1)
	if kc.Buf.Offset()%4 != 2 {
		t.Fatalf("cache view at byte %d, want 2 mod 4", kc.Buf.Offset())
	}
	slots := make([]int32, T)
	for i := range slots {
		slots[i] = int32(T - 1 - i)
	}
	l := accel.On(e.S)
	if l.KVWrite(kc, vc, e.F32(vals, T, kd), e.F32(neg, T, kd), e.I32(slots, 1, T)); l.Err() != nil {
		t.Fatalf("kv_write: %v", l.Err())
	}
	kw, vw := make([]float32, (T+1)*kd), make([]float32, (T+1)*kd)
	for i, s := range slots {
		for j := 0; j < kd; j++ {
			kw[(int(s)+1)*kd+j] = quant.HalfToFloat(quant.FloatToHalf(vals[i*kd+j]))
			vw[(int(s)+1)*kd+j] = quant.HalfToFloat(quant.FloatToHalf(neg[i*kd+j]))
		}
	}
	if err := acceltest.SameBits(e.ReadF16(kbig), kw); err != nil {
		t.Errorf("k cache: %v", err)
	}
	if err := acceltest.SameBits(e.ReadF16(vbig), vw); err != nil {
		t.Errorf("v cache: %v", err)
	}
}
