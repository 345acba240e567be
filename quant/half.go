package quant

import "math"

// HalfToFloat widens an IEEE binary16 to float32 (exact, including
// subnormals, infinities and NaNs).
func HalfToFloat(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: man × 2^-24, exact in float32.
	e := uint32(113)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// FloatToHalf rounds a float32 to the nearest IEEE binary16, ties to even,
// as ggml's GGML_FP32_TO_FP16 does (F16C's VCVTPS2PH with round-to-nearest,
// and its software fallback). Out-of-range values become infinities; NaNs
// stay NaNs.
func FloatToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal half (or zero): the value is m × 2^-24 with m = mant × 2^(e-1-13) ...
		if e < -10 {
			return sign
		}
		m := man | 0x800000
		shift := uint32(14 - e) // bits to drop: 13 + (1 - e)
		half := uint32(1) << (shift - 1)
		r := m >> shift
		rem := m & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to infinity: correct
	}
	return sign | uint16(r)
}

// BF16ToFloat widens a bfloat16 (exact).
func BF16ToFloat(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
