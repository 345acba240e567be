//go:build goexperiment.simd && amd64

package cpu

import (
	"math"
	"simd/archsimd"
	"testing"
	"unsafe"

	"github.com/reprise-ml/reprise/quant"
)

// TestQuantRowStep: the steps cover every row exactly once, each a size a
// kernel takes, and with a two-row kernel beside a three-row one no row is
// left to the one-row kernel unless it is the only one (with two-row
// kernels alone, as on widened panels, at most the odd one).
func TestQuantRowStep(t *testing.T) {
	for _, c := range []struct {
		rows      int
		many, two bool
	}{{3, true, true}, {2, true, true}, {4, true, false}, {3, false, false}} {
		for n := 1; n <= 40; n++ {
			ones := 0
			for left := n; left > 0; {
				m := quantRowStep(left, c.rows, c.many, c.two)
				switch {
				case m == 1:
					ones++
				case m == 2 && c.two, m == c.rows && c.many:
				default:
					t.Fatalf("%+v n %d: step %d with %d left", c, n, m, left)
				}
				if m > left {
					t.Fatalf("%+v n %d: step %d with %d left", c, n, m, left)
				}
				left -= m
			}
			odd := 0
			if c.rows == 2 {
				odd = n % 2
			}
			if c.two && n > 1 && ones > odd {
				t.Errorf("%+v n %d: %d rows on the one-row kernel", c, n, ones)
			}
		}
	}
}

// widenF16 is the kernels' widening of a panel's sixteen float16 scales
// (quant_amd64.go's f16Hi), as each kernel writes it out: src in f16Pos
// order, dst in output order.
//
//go:noinline
//go:norace
//go:nocheckptr
func widenF16(dst *[16]float32, src unsafe.Pointer) {
	sc := archsimd.LoadInt16x16((*[16]int16)(src))
	sh, sl := sc.ShiftAllRight(3).And(archsimd.LoadInt16x16(&f16Hi)), sc.ShiftAllLeft(13)
	sl.InterleaveLoGrouped(sh).AsFloat32x8().Mul(archsimd.LoadFloat32x8(&f16Scale)).Store((*[8]float32)(unsafe.Pointer(&dst[0])))
	sl.InterleaveHiGrouped(sh).AsFloat32x8().Mul(archsimd.LoadFloat32x8(&f16Scale)).Store((*[8]float32)(unsafe.Pointer(&dst[8])))
	archsimd.ClearAVXUpperBits()
}

// TestWidenF16: the kernels' widening of a float16 scale is exactly
// quant.HalfToFloat for every finite float16 (±0 and the subnormals
// included), in every output's place, which is what makes float16 panels
// give float32 panels' bits.
func TestWidenF16(t *testing.T) {
	if !quantVecBuilt {
		t.Skip("no quantized vector kernels here")
	}
	var src [16]uint16
	var got [16]float32
	n := 0
	for h := 0; h < 1<<16; h += 16 {
		for o := range src {
			// Output o's scale is a different value in each round.
			src[f16Pos(o)] = uint16(h + (o*7)%16)
		}
		widenF16(&got, unsafe.Pointer(&src[0]))
		for o := range got {
			v := src[f16Pos(o)]
			if v&0x7c00 == 0x7c00 {
				continue // infinite or NaN: never packed (quantPackable)
			}
			n++
			if want := quant.HalfToFloat(v); math.Float32bits(got[o]) != math.Float32bits(want) {
				t.Fatalf("output %d, %#04x: %g (%#08x), want %g (%#08x)", o, v, got[o], math.Float32bits(got[o]), want, math.Float32bits(want))
			}
		}
	}
	if n != 63488 {
		t.Fatalf("%d finite float16 values checked", n)
	}
}
