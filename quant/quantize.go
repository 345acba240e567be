package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Quantize encodes src, a whole number of t's blocks, into dst, which must
// be exactly RowBytes(t, len(src)) long, with ggml's reference quantizer for
// t (quantize_row_*_ref in ggml-quants.c, the one llama-quantize uses when
// it is given no importance matrix). Every float32 operation is done in
// ggml's order and rounded as ggml's C does compiled without fused
// multiply-adds, so the bytes equal llama-quantize's.
//
// Supported: F32, F16, BF16 (rounded to nearest even), Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
func Quantize(t Type, src []float32, dst []byte) error {
	ti, nb, err := blocksOf(t, len(src), len(dst))
	if err != nil {
		return err
	}
	var f func(x []float32, b []byte)
	switch t {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
		return nil
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], FloatToHalf(v))
		}
		return nil
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], FloatToBF16(v))
		}
		return nil
	case Q4_0:
		f = quantQ4_0
	case Q4_1:
		f = quantQ4_1
	case Q5_0:
		f = quantQ5_0
	case Q5_1:
		f = quantQ5_1
	case Q8_0:
		f = quantQ8_0
	case Q4_K:
		f = quantQ4_K
	case Q5_K:
		f = quantQ5_K
	case Q6_K:
		f = quantQ6_K
	default:
		return fmt.Errorf("%s: quantize: %w", ti.name, ErrUnsupported)
	}
	for i := 0; i < nb; i++ {
		f(src[i*ti.block:(i+1)*ti.block], dst[i*ti.bytes:(i+1)*ti.bytes])
	}
	return nil
}

// FloatToBF16 rounds a float32 to bfloat16, ties to even (NaNs stay quiet
// NaNs), as ggml's GGML_FP32_TO_BF16 does.
func FloatToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + (u>>16)&1)) >> 16)
}

func putHalf(b []byte, f float32) { binary.LittleEndian.PutUint16(b, FloatToHalf(f)) }

func absf(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

func sqrtf(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// NearestInt is ggml's nearest_int: round to nearest, ties to even, by
// adding 1.5·2^23 in float32 and reading the mantissa (exact for
// |f| < 2^22).
func NearestInt(f float32) int {
	v := f + 12582912
	return int(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// roundf is C's roundf: halves away from zero.
func roundf(f float32) float32 { return float32(math.Round(float64(f))) }

func quantQ8_0(x []float32, b []byte) {
	var amax float32
	for _, v := range x {
		if a := absf(v); a > amax { // MAX(amax, fabsf(v))
			amax = a
		}
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(b, d)
	for j, v := range x {
		b[2+j] = byte(int8(roundf(v * id)))
	}
}

// absMax returns the element of largest magnitude (the first of equals), as
// the legacy quantizers find it.
func absMax(x []float32) float32 {
	var amax, max float32
	for _, v := range x {
		if a := absf(v); amax < a {
			amax, max = a, v
		}
	}
	return max
}

func minMax(x []float32) (min, max float32) {
	min, max = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		if v < min {
			min = v
		}
		if v > max {
			max = v
		}
	}
	return min, max
}

func inv(d float32) float32 {
	if d != 0 {
		return 1 / d
	}
	return 0
}

func quantQ4_0(x []float32, b []byte) {
	d := absMax(x) / -8
	id := inv(d)
	putHalf(b, d)
	for j := 0; j < QK/2; j++ {
		x0 := x[j] * id
		x1 := x[j+QK/2] * id
		b[2+j] = byte(min(15, int8(x0+8.5))) | byte(min(15, int8(x1+8.5)))<<4
	}
}

func quantQ4_1(x []float32, b []byte) {
	mn, mx := minMax(x)
	d := (mx - mn) / 15
	id := inv(d)
	putHalf(b, d)
	putHalf(b[2:], mn)
	for j := 0; j < QK/2; j++ {
		x0 := (x[j] - mn) * id
		x1 := (x[j+QK/2] - mn) * id
		b[4+j] = byte(min(15, int8(x0+0.5))) | byte(min(15, int8(x1+0.5)))<<4
	}
}

func quantQ5_0(x []float32, b []byte) {
	d := absMax(x) / -16
	id := inv(d)
	putHalf(b, d)
	var qh uint32
	for j := 0; j < QK/2; j++ {
		x0 := x[j] * id
		x1 := x[j+QK/2] * id
		xi0 := byte(min(31, int8(x0+16.5)))
		xi1 := byte(min(31, int8(x1+16.5)))
		b[6+j] = xi0&0xf | (xi1&0xf)<<4
		qh |= uint32(xi0&0x10) >> 4 << j
		qh |= uint32(xi1&0x10) >> 4 << (j + QK/2)
	}
	binary.LittleEndian.PutUint32(b[2:], qh)
}

func quantQ5_1(x []float32, b []byte) {
	mn, mx := minMax(x)
	d := (mx - mn) / 31
	id := inv(d)
	putHalf(b, d)
	putHalf(b[2:], mn)
	var qh uint32
	for j := 0; j < QK/2; j++ {
		x0 := (x[j] - mn) * id
		x1 := (x[j+QK/2] - mn) * id
		xi0 := byte(x0 + 0.5)
		xi1 := byte(x1 + 0.5)
		b[8+j] = xi0&0xf | (xi1&0xf)<<4
		qh |= uint32(xi0&0x10) >> 4 << j
		qh |= uint32(xi1&0x10) >> 4 << (j + QK/2)
	}
	binary.LittleEndian.PutUint32(b[4:], qh)
}

// makeQKX2 is ggml's make_qkx2_quants: levels L in [0, nmax] and a scale
// and min (returned as -min, the amount subtracted) that minimise the
// weighted error, searching nstep+1 scales around the range's.
func makeQKX2(nmax int, x, w []float32, L, aux []uint8, rmin, rdelta float32, nstep int, mad bool) (scale, theMin float32) {
	n := len(x)
	mn, mx := x[0], x[0]
	sumW := w[0]
	sumX := sumW * x[0]
	for i := 1; i < n; i++ {
		if x[i] < mn {
			mn = x[i]
		}
		if x[i] > mx {
			mx = x[i]
		}
		sumW += w[i]
		sumX += float32(w[i] * x[i])
	}
	if mn > 0 {
		mn = 0
	}
	if mx == mn {
		for i := range L[:n] {
			L[i] = 0
		}
		return 0, -mn
	}
	fnmax := float32(nmax)
	iscale := fnmax / (mx - mn)
	scale = 1 / iscale
	var best float32
	for i := 0; i < n; i++ {
		l := NearestInt(iscale * (x[i] - mn))
		L[i] = uint8(max(0, min(nmax, l)))
		diff := float32(float32(scale*float32(L[i]))+mn) - x[i]
		if mad {
			diff = absf(diff)
		} else {
			diff = diff * diff
		}
		best += float32(w[i] * diff)
	}
	if nstep < 1 {
		return scale, -mn
	}
	for is := 0; is <= nstep; is++ {
		iscale = float32(float32(rmin+float32(rdelta*float32(is)))+fnmax) / (mx - mn)
		var sumL, sumL2, sumXL float32
		for i := 0; i < n; i++ {
			l := max(0, min(nmax, NearestInt(iscale*(x[i]-mn))))
			aux[i] = uint8(l)
			fl := float32(l)
			wl := w[i] * fl
			sumL += wl
			sumL2 += float32(wl * fl)
			sumXL += float32(wl * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var cur float32
			for i := 0; i < n; i++ {
				diff := float32(float32(thisScale*float32(aux[i]))+thisMin) - x[i]
				if mad {
					diff = absf(diff)
				} else {
					diff = diff * diff
				}
				cur += float32(w[i] * diff)
			}
			if cur < best {
				copy(L[:n], aux[:n])
				best = cur
				scale = thisScale
				mn = thisMin
			}
		}
	}
	return scale, -mn
}

// groupMaxEps is ggml's GROUP_MAX_EPS: a group whose largest magnitude is
// below it is all zeros.
const groupMaxEps = 1e-15

// makeQX is ggml's make_qx_quants with rmse_type 1 and no importance
// weights (the weights are x²): levels L in [0, 2·nmax) and the scale.
func makeQX(nmax int, x []float32, L []int8) float32 {
	var mx, amax float32
	for _, v := range x {
		if a := absf(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax < groupMaxEps {
		for i := range L[:len(x)] {
			L[i] = 0
		}
		return 0
	}
	fnmax := float32(nmax)
	iscale := -fnmax / mx
	var sumlx, suml2 float32
	for i, v := range x {
		l := max(-nmax, min(nmax-1, NearestInt(iscale*v)))
		L[i] = int8(l + nmax)
		w := v * v
		fl := float32(l)
		sumlx += float32(float32(w*v) * fl)
		suml2 += float32(float32(w*fl) * fl)
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fnmax + float32(0.1*float32(is))) / mx
		sumlx, suml2 = 0, 0
		for _, v := range x {
			l := max(-nmax, min(nmax-1, NearestInt(iscale*v)))
			w := v * v
			fl := float32(l)
			sumlx += float32(float32(w*v) * fl)
			suml2 += float32(float32(w*fl) * fl)
		}
		if suml2 > 0 && float32(sumlx*sumlx) > float32(best*suml2) {
			for i, v := range x {
				L[i] = int8(nmax + max(-nmax, min(nmax-1, NearestInt(iscale*v))))
			}
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// quantK45 is quantize_row_q4_K_ref (nmax 15) and quantize_row_q5_K_ref
// (nmax 31) up to the packing of the levels, which the caller does: it
// fills the block's d, dmin and scales and returns the levels.
func quantK45(x []float32, b []byte, nmax int, rmin, rdelta float32, nstep int, L *[QKK]uint8) {
	var (
		aux          [32]uint8
		w            [32]float32
		mins, scales [QKK / 32]float32
		maxScale     float32
		maxMin       float32
	)
	for j := 0; j < QKK/32; j++ {
		xj := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xj {
			sumX2 += float32(v * v)
		}
		avX := sqrtf(sumX2 / 32)
		for l, v := range xj {
			w[l] = avX + absf(v)
		}
		scales[j], mins[j] = makeQKX2(nmax, xj, w[:], L[32*j:32*j+32], aux[:], rmin, rdelta, nstep, false)
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	sc := b[4:16]
	for j := 0; j < QKK/32; j++ {
		ls := min(63, uint8(NearestInt(invScale*scales[j])))
		lm := min(63, uint8(NearestInt(invMin*mins[j])))
		if j < 4 {
			sc[j] = ls
			sc[j+4] = lm
		} else {
			sc[j+4] = ls&0xf | (lm&0xf)<<4
			sc[j-4] |= (ls >> 4) << 6
			sc[j] |= (lm >> 4) << 6
		}
	}
	putHalf(b, maxScale/63)
	putHalf(b[2:], maxMin/63)
	d, dmin := half(b), half(b[2:])
	for j := 0; j < QKK/32; j++ {
		s, m := ScaleMinK4(j, sc)
		dj := d * float32(s)
		if dj == 0 {
			continue
		}
		dm := dmin * float32(m)
		for i := 0; i < 32; i++ {
			l := NearestInt((x[32*j+i] + dm) / dj)
			L[32*j+i] = uint8(max(0, min(nmax, l)))
		}
	}
}

func quantQ4_K(x []float32, b []byte) {
	clear(b)
	var L [QKK]uint8
	quantK45(x, b, 15, -1, 0.1, 20, &L)
	q := b[16:144]
	for j := 0; j < QKK; j += 64 {
		for l := 0; l < 32; l++ {
			q[l] = L[j+l] | L[j+l+32]<<4
		}
		q = q[32:]
	}
}

func quantQ5_K(x []float32, b []byte) {
	clear(b)
	var L [QKK]uint8
	quantK45(x, b, 31, -0.5, 0.1, 15, &L)
	qh, ql := b[16:48], b[48:176]
	m1, m2 := byte(1), byte(2)
	for n := 0; n < QKK; n += 64 {
		for j := 0; j < 32; j++ {
			l1, l2 := L[n+j], L[n+j+32]
			if l1 > 15 {
				l1 -= 16
				qh[j] |= m1
			}
			if l2 > 15 {
				l2 -= 16
				qh[j] |= m2
			}
			ql[j] = l1 | l2<<4
		}
		m1 <<= 2
		m2 <<= 2
		ql = ql[32:]
	}
}

func quantQ6_K(x []float32, b []byte) {
	clear(b)
	var (
		L      [QKK]int8
		scales [QKK / 16]float32
		maxS   float32
		maxAbs float32
	)
	for ib := 0; ib < QKK/16; ib++ {
		s := makeQX(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16])
		scales[ib] = s
		if a := absf(s); a > maxAbs {
			maxAbs, maxS = a, s
		}
	}
	if maxAbs < groupMaxEps {
		return // all zero, d = 0
	}
	iscale := -128 / maxS
	putHalf(b[208:], 1/iscale)
	sc := b[192:208]
	for ib := range scales {
		sc[ib] = byte(int8(min(127, NearestInt(iscale*scales[ib]))))
	}
	d := half(b[208:])
	for j := 0; j < QKK/16; j++ {
		dj := d * float32(int8(sc[j]))
		if dj == 0 {
			continue
		}
		for i := 0; i < 16; i++ {
			l := NearestInt(x[16*j+i] / dj)
			L[16*j+i] = int8(max(-32, min(31, l)) + 32)
		}
	}
	ql, qh := b[0:128], b[128:192]
	for j := 0; j < QKK; j += 128 {
		for l := 0; l < 32; l++ {
			q1 := uint8(L[j+l]) & 0xf
			q2 := uint8(L[j+l+32]) & 0xf
			q3 := uint8(L[j+l+64]) & 0xf
			q4 := uint8(L[j+l+96]) & 0xf
			ql[l] = q1 | q3<<4
			ql[l+32] = q2 | q4<<4
			qh[l] = uint8(L[j+l])>>4 | (uint8(L[j+l+32])>>4)<<2 | (uint8(L[j+l+64])>>4)<<4 | (uint8(L[j+l+96])>>4)<<6
		}
		ql = ql[64:]
		qh = qh[32:]
	}
}
