package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Dequantize widens src, a whole number of blocks of type t, into dst,
// which must hold exactly the elements src encodes. It follows ggml's
// dequantize_row_* (ggml-quants.c) operation for operation; every product
// is rounded to float32 before the add or subtract that follows it (the
// explicit float32 conversions keep Go from fusing them on any
// architecture), which is what ggml's reference gives compiled without
// fused multiply-adds.
func Dequantize(t Type, src []byte, dst []float32) error {
	ti, nb, err := blocksOf(t, len(dst), len(src))
	if err != nil {
		return err
	}
	var f func(b []byte, y []float32)
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
		return nil
	case F16:
		for i := range dst {
			dst[i] = HalfToFloat(binary.LittleEndian.Uint16(src[2*i:]))
		}
		return nil
	case BF16:
		for i := range dst {
			dst[i] = BF16ToFloat(binary.LittleEndian.Uint16(src[2*i:]))
		}
		return nil
	case Q4_0:
		f = deqQ4_0
	case Q4_1:
		f = deqQ4_1
	case Q5_0:
		f = deqQ5_0
	case Q5_1:
		f = deqQ5_1
	case Q8_0:
		f = deqQ8_0
	case Q2_K:
		f = deqQ2_K
	case Q3_K:
		f = deqQ3_K
	case Q4_K:
		f = deqQ4_K
	case Q5_K:
		f = deqQ5_K
	case Q6_K:
		f = deqQ6_K
	default:
		return fmt.Errorf("%s: dequantize: %w", ti.name, ErrUnsupported)
	}
	for i := 0; i < nb; i++ {
		f(src[i*ti.bytes:(i+1)*ti.bytes], dst[i*ti.block:(i+1)*ti.block])
	}
	return nil
}

func half(b []byte) float32 { return HalfToFloat(binary.LittleEndian.Uint16(b)) }

// Q4_0: d f16, qs[16]; element j is (qs[j]&15 - 8)·d, element j+16 is
// (qs[j]>>4 - 8)·d.
func deqQ4_0(b []byte, y []float32) {
	d := half(b)
	qs := b[2:18]
	for j := 0; j < QK/2; j++ {
		y[j] = float32(int(qs[j]&0xf)-8) * d
		y[j+QK/2] = float32(int(qs[j]>>4)-8) * d
	}
}

// Q4_1: d f16, m f16, qs[16]; x = q·d + m.
func deqQ4_1(b []byte, y []float32) {
	d, m := half(b), half(b[2:])
	qs := b[4:20]
	for j := 0; j < QK/2; j++ {
		y[j] = float32(float32(qs[j]&0xf)*d) + m
		y[j+QK/2] = float32(float32(qs[j]>>4)*d) + m
	}
}

// Q5_0: d f16, qh[4] (bit j: the fifth bit of element j), qs[16]; x = (q-16)·d.
func deqQ5_0(b []byte, y []float32) {
	d := half(b)
	qh := binary.LittleEndian.Uint32(b[2:])
	qs := b[6:22]
	for j := 0; j < QK/2; j++ {
		h0 := byte(qh>>j<<4) & 0x10
		h1 := byte(qh>>(j+12)) & 0x10
		y[j] = float32(int32(qs[j]&0xf|h0)-16) * d
		y[j+QK/2] = float32(int32(qs[j]>>4|h1)-16) * d
	}
}

// Q5_1: d f16, m f16, qh[4], qs[16]; x = q·d + m.
func deqQ5_1(b []byte, y []float32) {
	d, m := half(b), half(b[2:])
	qh := binary.LittleEndian.Uint32(b[4:])
	qs := b[8:24]
	for j := 0; j < QK/2; j++ {
		h0 := byte(qh>>j<<4) & 0x10
		h1 := byte(qh>>(j+12)) & 0x10
		y[j] = float32(float32(qs[j]&0xf|h0)*d) + m
		y[j+QK/2] = float32(float32(qs[j]>>4|h1)*d) + m
	}
}

// Q8_0: d f16, qs[32] int8; x = q·d.
func deqQ8_0(b []byte, y []float32) {
	d := half(b)
	for j := 0; j < QK; j++ {
		y[j] = float32(int8(b[2+j])) * d
	}
}

// Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d f16, dmin f16.
func deqQ2_K(b []byte, y []float32) {
	scales, q := b[0:16], b[16:80]
	d, dmin := half(b[80:]), half(b[82:])
	is := 0
	for n := 0; n < QKK; n += 128 {
		shift := uint(0)
		for j := 0; j < 4; j++ {
			for h := 0; h < 2; h++ {
				sc := scales[is]
				is++
				dl := d * float32(sc&0xf)
				ml := dmin * float32(sc>>4)
				for l := 0; l < 16; l++ {
					y[0] = float32(dl*float32((q[l+16*h]>>shift)&3)) - ml
					y = y[1:]
				}
			}
			shift += 2
		}
		q = q[32:]
	}
}

// Q3_K: hmask[32], qs[64], scales[12] (sixteen 6-bit scales), d f16.
func deqQ3_K(b []byte, y []float32) {
	hm, q, sc := b[0:32], b[32:96], b[96:108]
	d := half(b[108:])
	var scales [16]int8
	for j := 0; j < 16; j++ {
		var lo byte
		if j < 8 {
			lo = sc[j] & 0xf
		} else {
			lo = sc[j-8] >> 4
		}
		hi := (sc[8+j%4] >> (2 * (j / 4))) & 3
		scales[j] = int8(lo|hi<<4) - 32
	}
	is := 0
	m := byte(1)
	for n := 0; n < QKK; n += 128 {
		shift := uint(0)
		for j := 0; j < 4; j++ {
			for h := 0; h < 2; h++ {
				dl := d * float32(scales[is])
				is++
				for l := 0; l < 16; l++ {
					v := int((q[l+16*h] >> shift) & 3)
					if hm[l+16*h]&m == 0 {
						v -= 4
					}
					y[0] = dl * float32(v)
					y = y[1:]
				}
			}
			shift += 2
			m <<= 1
		}
		q = q[32:]
	}
}

// ScaleMinK4 unpacks the j-th 6-bit scale and min of a Q4_K or Q5_K block's
// 12 scale bytes (ggml's get_scale_min_k4).
func ScaleMinK4(j int, q []byte) (sc, m byte) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// Q4_K: d f16, dmin f16, scales[12], qs[128]; x = d·sc·q - dmin·m per 32.
func deqQ4_K(b []byte, y []float32) {
	d, dmin := half(b), half(b[2:])
	scales, q := b[4:16], b[16:144]
	is := 0
	for j := 0; j < QKK; j += 64 {
		sc, m := ScaleMinK4(is, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = ScaleMinK4(is+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		for l := 0; l < 32; l++ {
			y[l] = float32(d1*float32(q[l]&0xf)) - m1
			y[l+32] = float32(d2*float32(q[l]>>4)) - m2
		}
		y = y[64:]
		q = q[32:]
		is += 2
	}
}

// Q5_K: d f16, dmin f16, scales[12], qh[32], qs[128].
func deqQ5_K(b []byte, y []float32) {
	d, dmin := half(b), half(b[2:])
	scales, qh, ql := b[4:16], b[16:48], b[48:176]
	is := 0
	u1, u2 := byte(1), byte(2)
	for j := 0; j < QKK; j += 64 {
		sc, m := ScaleMinK4(is, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = ScaleMinK4(is+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		for l := 0; l < 32; l++ {
			v1, v2 := int(ql[l]&0xf), int(ql[l]>>4)
			if qh[l]&u1 != 0 {
				v1 += 16
			}
			if qh[l]&u2 != 0 {
				v2 += 16
			}
			y[l] = float32(d1*float32(v1)) - m1
			y[l+32] = float32(d2*float32(v2)) - m2
		}
		y = y[64:]
		ql = ql[32:]
		is += 2
		u1 <<= 2
		u2 <<= 2
	}
}

// Q6_K: ql[128], qh[64], scales[16] int8, d f16; x = d·sc·(q-32) per 16.
func deqQ6_K(b []byte, y []float32) {
	ql, qh, sc := b[0:128], b[128:192], b[192:208]
	d := half(b[208:])
	for n := 0; n < QKK; n += 128 {
		for l := 0; l < 32; l++ {
			is := l / 16
			q1 := int8(ql[l]&0xf|(qh[l]&3)<<4) - 32
			q2 := int8(ql[l+32]&0xf|((qh[l]>>2)&3)<<4) - 32
			q3 := int8(ql[l]>>4|((qh[l]>>4)&3)<<4) - 32
			q4 := int8(ql[l+32]>>4|((qh[l]>>6)&3)<<4) - 32
			y[l] = float32(d*float32(int8(sc[is]))) * float32(q1)
			y[l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
			y[l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
			y[l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
		}
		y = y[128:]
		ql = ql[64:]
		qh = qh[32:]
		sc = sc[8:]
	}
}

// blocksOf checks that elems elements of type t are whole blocks held in
// exactly nbytes bytes, and returns t's layout and the block count.
func blocksOf(t Type, elems, nbytes int) (typeInfo, int, error) {
	ti, ok := types[t]
	if !ok {
		return ti, 0, fmt.Errorf("%w %d", ErrUnknownType, uint32(t))
	}
	if elems%ti.block != 0 {
		return ti, 0, fmt.Errorf("%s: %d elements are not whole blocks of %d: %w", ti.name, elems, ti.block, ErrBlocks)
	}
	nb := elems / ti.block
	if nbytes != nb*ti.bytes {
		return ti, 0, fmt.Errorf("%s: %d bytes for %d elements, want %d: %w", ti.name, nbytes, elems, nb*ti.bytes, ErrBlocks)
	}
	return ti, nb, nil
}
