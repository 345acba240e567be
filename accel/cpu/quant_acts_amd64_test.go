//go:build goexperiment.simd && amd64

package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/reprise-ml/reprise/quant"
)

// TestQScales: quantActsVec's vector Q8_0 scales (qScales) equal the
// scalar code's, float16 rounding and inverse, for largest magnitudes
// across float16's range and past it at both ends, for scales on the
// rounding's ties (odd and even) and next to them, and around the
// overflow to infinity; it flags exactly the blocks outside the scalar
// FloatToHalf's normal path.
func TestQScales(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	var am []uint32
	for i := 0; i < 4096; i++ {
		am = append(am, r.Uint32()>>1) // any non-negative bits: NaNs, infinity and subnormals too
		am = append(am, 0x33000000+uint32(r.IntN(0x47ffffff-0x33000000)))
	}
	for _, d := range []uint32{113 << 23, 0x387fe000, 0x477fe000, 0x477ff000, 0x477fefff, 0x47800000} {
		for j := uint32(0); j < 64; j++ {
			for _, db := range []uint32{d + j<<13 + 0x1000, d + j<<13 + 0xfff, d + j<<13 + 0x1001, d + j<<13} {
				// An amax whose scale is exactly d's bits (where one is).
				if v := math.Float32frombits(db) * 127; v/127 == math.Float32frombits(db) {
					am = append(am, math.Float32bits(v))
				}
			}
		}
	}
	am = append(am, 0, 0x7f800000, 0x7fc00000)
	for len(am)%8 != 0 {
		am = append(am, 0)
	}
	n := len(am)
	dx, inv, ok := make([]float32, n), make([]float32, n), make([]uint8, n/8)
	qScales(unsafe.Pointer(&am[0]), unsafe.Pointer(&dx[0]), unsafe.Pointer(&inv[0]), unsafe.Pointer(&ok[0]), n/8)
	ties := 0
	for b, bits := range am {
		amax := math.Float32frombits(bits)
		d := amax / 127
		h := quant.FloatToHalf(d)
		want := quant.HalfToFloat(h)
		// float16 normal on FloatToHalf's normal path (a scale just below
		// 2^-14 that rounds up to it is left to the scalar code).
		e := math.Float32bits(d) >> 23
		normal := e >= 113 && e <= 142 && h&0x7c00 != 0x7c00
		got := ok[b/8]>>(b%8)&1 != 0
		if got != normal {
			t.Fatalf("amax %#x (scale %#x): flagged %v, want %v", bits, math.Float32bits(d), got, normal)
		}
		if math.Float32bits(d)&0x1fff == 0x1000 {
			ties++
		}
		if !got {
			continue
		}
		if math.Float32bits(dx[b]) != math.Float32bits(want) || math.Float32bits(inv[b]) != math.Float32bits(127/amax) {
			t.Fatalf("amax %#x: scale %#x inverse %#x, want %#x %#x", bits, math.Float32bits(dx[b]), math.Float32bits(inv[b]), math.Float32bits(want), math.Float32bits(127/amax))
		}
	}
	if ties < 16 {
		t.Fatalf("only %d scales on a tie", ties)
	}
}
