package quant

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

func TestTypeSizes(t *testing.T) {
	// Block sizes and bytes from ggml-common.h's block structs.
	for _, c := range []struct {
		t            Type
		name         string
		block, bytes int
	}{
		{F32, "F32", 1, 4}, {F16, "F16", 1, 2}, {BF16, "BF16", 1, 2},
		{Q4_0, "Q4_0", 32, 18}, {Q4_1, "Q4_1", 32, 20}, {Q5_0, "Q5_0", 32, 22},
		{Q5_1, "Q5_1", 32, 24}, {Q8_0, "Q8_0", 32, 34}, {Q8_1, "Q8_1", 32, 36},
		{Q2_K, "Q2_K", 256, 84}, {Q3_K, "Q3_K", 256, 110}, {Q4_K, "Q4_K", 256, 144},
		{Q5_K, "Q5_K", 256, 176}, {Q6_K, "Q6_K", 256, 210}, {Q8_K, "Q8_K", 256, 292},
	} {
		if c.t.String() != c.name || c.t.BlockSize() != c.block || c.t.BlockBytes() != c.bytes {
			t.Errorf("%d: %s %d %d, want %s %d %d", uint32(c.t), c.t, c.t.BlockSize(), c.t.BlockBytes(), c.name, c.block, c.bytes)
		}
		if p, err := ParseType(c.name); err != nil || p != c.t {
			t.Errorf("ParseType(%q) = %v, %v", c.name, p, err)
		}
	}
	if n, err := RowBytes(Q4_K, 512); err != nil || n != 288 {
		t.Errorf("RowBytes(Q4_K, 512) = %d, %v", n, err)
	}
	if n, err := RowBytes(F16, 3); err != nil || n != 6 {
		t.Errorf("RowBytes(F16, 3) = %d, %v", n, err)
	}
	if _, err := RowBytes(Q8_0, 48); !errors.Is(err, ErrBlocks) {
		t.Errorf("RowBytes(Q8_0, 48) err = %v", err)
	}
	if _, err := RowBytes(Type(4), 32); !errors.Is(err, ErrUnknownType) {
		t.Errorf("RowBytes(type 4) err = %v", err)
	}
	if _, err := ParseType("q9_9"); !errors.Is(err, ErrUnknownType) {
		t.Errorf("ParseType(q9_9) err = %v", err)
	}
	if Type(99).String() != "type(99)" || Type(99).Known() {
		t.Errorf("Type(99) = %s", Type(99))
	}
}

func TestHalf(t *testing.T) {
	for _, c := range []struct {
		h uint16
		f float32
	}{
		{0x3c00, 1}, {0x3800, 0.5}, {0xc000, -2}, {0x7bff, 65504}, {0x0001, 0x1p-24},
		{0x0400, 0x1p-14}, {0x03ff, 1023 * 0x1p-24}, {0x8000, float32(math.Copysign(0, -1))},
		{0x7c00, float32(math.Inf(1))}, {0xfc00, float32(math.Inf(-1))}, {0x3555, 0x1.554p-2},
	} {
		if got := HalfToFloat(c.h); math.Float32bits(got) != math.Float32bits(c.f) {
			t.Errorf("HalfToFloat(%#04x) = %g, want %g", c.h, got, c.f)
		}
		if got := FloatToHalf(c.f); got != c.h {
			t.Errorf("FloatToHalf(%g) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
	// Rounding: ties to even, overflow to infinity, underflow through the subnormals.
	for _, c := range []struct {
		f float32
		h uint16
	}{
		{1 + 0x1p-11, 0x3c00}, {1 + 3*0x1p-11, 0x3c02}, {1 + 0x1p-11 + 0x1p-20, 0x3c01},
		{65519, 0x7bff}, {65520, 0x7c00}, {1e10, 0x7c00}, {-1e10, 0xfc00},
		{0x1p-25, 0x0000}, {0x1p-25 + 0x1p-35, 0x0001}, {3 * 0x1p-25, 0x0002}, {0x1p-26, 0},
		{0x1p-14 - 0x1p-25, 0x0400}, {1e-30, 0}, {-1e-30, 0x8000},
	} {
		if got := FloatToHalf(c.f); got != c.h {
			t.Errorf("FloatToHalf(%g) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
	if h := FloatToHalf(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("FloatToHalf(NaN) = %#04x", h)
	}
	// Every non-NaN half survives the round trip.
	for h := 0; h < 1<<16; h++ {
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			continue
		}
		if got := FloatToHalf(HalfToFloat(uint16(h))); got != uint16(h) {
			t.Fatalf("round trip of %#04x gave %#04x", h, got)
		}
	}
	if BF16ToFloat(0x3f80) != 1 || BF16ToFloat(0xc040) != -3 {
		t.Error("BF16ToFloat")
	}
}

func put16(b []byte, v uint16) { binary.LittleEndian.PutUint16(b, v) }

// checkAt compares chosen elements of got with values worked out by hand
// from ggml's definitions (the comments at each block say how).
func checkAt(t *testing.T, name string, got []float32, want map[int]float32) {
	t.Helper()
	for i, w := range want {
		if got[i] != w {
			t.Errorf("%s: element %d = %g, want %g", name, i, got[i], w)
		}
	}
}

func TestDequantizeLegacy(t *testing.T) {
	// Q8_0: d = 0.5, qs = -128, -127, ..., so x_j = (j-128)·0.5 for j < 32
	// ... and qs[31] = 127 to check the top of the range.
	b := make([]byte, 34)
	put16(b, 0x3800)
	for j := 0; j < 32; j++ {
		b[2+j] = byte(int8(j*8 - 128))
	}
	b[2+31] = 127
	y := make([]float32, 32)
	if err := Dequantize(Q8_0, b, y); err != nil {
		t.Fatal(err)
	}
	checkAt(t, "q8_0", y, map[int]float32{0: -64, 1: -60, 16: 0, 17: 4, 30: 56, 31: 63.5})

	// Q4_0: d = 0.5, qs[j] = j | (15-j)<<4: x_j = (j-8)/2, x_{16+j} = (7-j)/2.
	b = make([]byte, 18)
	put16(b, 0x3800)
	for j := 0; j < 16; j++ {
		b[2+j] = byte(j | (15-j)<<4)
	}
	if err := Dequantize(Q4_0, b, y); err != nil {
		t.Fatal(err)
	}
	checkAt(t, "q4_0", y, map[int]float32{0: -4, 1: -3.5, 8: 0, 15: 3.5, 16: 3.5, 23: 0, 31: -4})

	// Q4_1: d = 2, m = -1.5: x = q·2 - 1.5.
	b = make([]byte, 20)
	put16(b, 0x4000)
	put16(b[2:], 0xbe00)
	for j := 0; j < 16; j++ {
		b[4+j] = byte(j | (15-j)<<4)
	}
	if err := Dequantize(Q4_1, b, y); err != nil {
		t.Fatal(err)
	}
	checkAt(t, "q4_1", y, map[int]float32{0: -1.5, 1: 0.5, 15: 28.5, 16: 28.5, 31: -1.5})

	// Q5_0: d = 1, qh = bit 0 and bit 17 set (fifth bit of elements 0 and 17),
	// qs[j] = j | (15-j)<<4: x_0 = 16-16 = 0, x_1 = 1-16, x_17 = (14|16)-16 = 14,
	// x_16 = 15-16 = -1.
	b = make([]byte, 22)
	put16(b, 0x3c00)
	binary.LittleEndian.PutUint32(b[2:], 1|1<<17)
	for j := 0; j < 16; j++ {
		b[6+j] = byte(j | (15-j)<<4)
	}
	if err := Dequantize(Q5_0, b, y); err != nil {
		t.Fatal(err)
	}
	checkAt(t, "q5_0", y, map[int]float32{0: 0, 1: -15, 15: -1, 16: -1, 17: 14, 31: -16})

	// Q5_1: d = 0.5, m = 1, same qh and qs: x = q/2 + 1.
	b = make([]byte, 24)
	put16(b, 0x3800)
	put16(b[2:], 0x3c00)
	binary.LittleEndian.PutUint32(b[4:], 1|1<<17)
	for j := 0; j < 16; j++ {
		b[8+j] = byte(j | (15-j)<<4)
	}
	if err := Dequantize(Q5_1, b, y); err != nil {
		t.Fatal(err)
	}
	checkAt(t, "q5_1", y, map[int]float32{0: 9, 1: 1.5, 16: 8.5, 17: 16, 31: 1})
}

func TestDequantizeK(t *testing.T) {
	y := make([]float32, 256)

	// Q2_K: d = 1, dmin = 0.5; scale byte s = s&15 | 1<<4 (every min 0.5·1).
	// qs[0:32] = 0xe4 (q = 0,1,2,3 at shifts 0,2,4,6), qs[32:64] = 0x1b (3,2,1,0).
	// Element 128n + 32j + 16h + l uses scale 8n+2j+h and shift 2j:
	// x = (8n+2j+h)·q - 0.5.
	b := make([]byte, 84)
	for i := 0; i < 16; i++ {
		b[i] = byte(i) | 1<<4
	}
	for l := 0; l < 64; l++ {
		b[16+l] = 0xe4
		if l >= 32 {
			b[16+l] = 0x1b
		}
	}
	put16(b[80:], 0x3c00)
	put16(b[82:], 0x3800)
	if err := Dequantize(Q2_K, b, y); err != nil {
		t.Fatal(err)
	}
	checkAt(t, "q2_k", y, map[int]float32{0: -0.5, 16: -0.5, 32: 1.5, 48: 2.5, 64: 7.5, 96: 17.5,
		112: 20.5, 128: 23.5, 160: 19.5, 192: 11.5, 224: -0.5, 255: -0.5})

	// Q3_K: d = 1. scales[0:8] = 0x21 (low nibbles 1, high nibbles 2),
	// scales[8] = 0xe4 (high bits 0,1,2,3 for scales 0,4,8,12), others 0:
	// scale j = {1,1,1,1,17,1,1,1,34,2,2,2,50,2,2,2}[j] - 32. hmask = 0xff except
	// hmask[0] = 0 (element l=0 of every group loses 4). qs = 0xe4.
	b = make([]byte, 110)
	for i := 0; i < 32; i++ {
		b[i] = 0xff
	}
	b[0] = 0
	for i := 0; i < 64; i++ {
		b[32+i] = 0xe4
	}
	for i := 0; i < 8; i++ {
		b[96+i] = 0x21
	}
	b[104] = 0xe4
	put16(b[108:], 0x3c00)
	if err := Dequantize(Q3_K, b, y); err != nil {
		t.Fatal(err)
	}
	checkAt(t, "q3_k", y, map[int]float32{0: 124, 1: 0, 16: 0, 32: 93, 33: -31, 64: 30, 65: -30,
		96: 31, 97: -93, 128: -8, 129: 0, 192: -36, 193: 36, 255: -90})

	// Q4_K: d = 1, dmin = 0.5. Scale bytes give (scale, min) per 32:
	// (1,5) (2,6) (3,7) (4,8) (17,34) (3,4) (5,6) (7,8).
	// qs[i] = i%16 | (15-i%16)<<4; qs[32c+l] low nibble is element 64c+l,
	// high nibble element 64c+32+l: x = scale·q - 0.5·min.
	b = make([]byte, 144)
	put16(b, 0x3c00)
	put16(b[2:], 0x3800)
	copy(b[4:], []byte{1 | 0x40, 2, 3, 4, 5 | 0x80, 6, 7, 8, 0x21, 0x43, 0x65, 0x87})
	for i := 0; i < 128; i++ {
		b[16+i] = byte(i%16 | (15-i%16)<<4)
	}
	if err := Dequantize(Q4_K, b, y); err != nil {
		t.Fatal(err)
	}
	checkAt(t, "q4_k", y, map[int]float32{0: -2.5, 1: -1.5, 31: 12.5, 32: 27, 63: -3, 128: -17,
		129: 0, 130: 17, 160: 43, 224: 101, 255: -4})

	// Q5_K: as Q4_K with qh[0] = 0xff (element l=0 of every 32 gains 16).
	b = make([]byte, 176)
	put16(b, 0x3c00)
	put16(b[2:], 0x3800)
	copy(b[4:], []byte{1 | 0x40, 2, 3, 4, 5 | 0x80, 6, 7, 8, 0x21, 0x43, 0x65, 0x87})
	b[16] = 0xff
	for i := 0; i < 128; i++ {
		b[48+i] = byte(i%16 | (15-i%16)<<4)
	}
	if err := Dequantize(Q5_K, b, y); err != nil {
		t.Fatal(err)
	}
	checkAt(t, "q5_k", y, map[int]float32{0: 13.5, 1: -1.5, 32: 59, 33: 25, 128: 255, 129: 0,
		224: 213, 255: -4})

	// Q6_K: d = 0.5, scales = 1,-2,3,-4,...,-16. ql[64n+l] = 0x21 for l < 32,
	// 0x43 for l >= 32; qh[0:32] = 0xe4, qh[32:64] = 0x1b. First half:
	// q1 = 1|0<<4 - 32 = -31, q2 = 3|1<<4 - 32 = -13, q3 = 2|2<<4 - 32 = 2,
	// q4 = 4|3<<4 - 32 = 20; second half: q1 = 1|3<<4 - 32 = 17,
	// q2 = 3|2<<4 - 32 = 3, q3 = 2|1<<4 - 32 = -14, q4 = 4 - 32 = -28.
	b = make([]byte, 210)
	for i := 0; i < 128; i++ {
		b[i] = 0x21
		if i%64 >= 32 {
			b[i] = 0x43
		}
	}
	for i := 0; i < 64; i++ {
		b[128+i] = 0xe4
		if i >= 32 {
			b[128+i] = 0x1b
		}
	}
	for i := 0; i < 16; i++ {
		s := int8(i + 1)
		if i%2 == 1 {
			s = -s
		}
		b[192+i] = byte(s)
	}
	put16(b[208:], 0x3800)
	if err := Dequantize(Q6_K, b, y); err != nil {
		t.Fatal(err)
	}
	checkAt(t, "q6_k", y, map[int]float32{0: -15.5, 16: 31, 32: -19.5, 48: 26, 64: 5, 96: 70,
		127: -80, 128: 76.5, 160: 16.5, 192: -91, 255: 224})
}

func TestDequantizeFloat(t *testing.T) {
	b := []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}
	y := make([]float32, 2)
	if err := Dequantize(F32, b, y); err != nil || y[0] != 1 || y[1] != -2 {
		t.Errorf("f32: %v %v", y, err)
	}
	y = make([]float32, 4)
	if err := Dequantize(F16, b, y); err != nil || y[1] != 1.875 || y[3] != -2 {
		t.Errorf("f16: %v %v", y, err) // 0x3f80 as f16 is 1.875
	}
	if err := Dequantize(BF16, b, y); err != nil || y[1] != 1 || y[3] != -2 {
		t.Errorf("bf16: %v %v", y, err)
	}
}

func TestDequantizeErrors(t *testing.T) {
	for _, c := range []struct {
		t    Type
		src  int
		dst  int
		want error
	}{
		{Q8_0, 34, 31, ErrBlocks}, {Q8_0, 33, 32, ErrBlocks}, {Q4_K, 144, 512, ErrBlocks},
		{F32, 7, 2, ErrBlocks}, {Type(77), 4, 1, ErrUnknownType}, {Q8_1, 36, 32, ErrUnsupported},
	} {
		err := Dequantize(c.t, make([]byte, c.src), make([]float32, c.dst))
		if !errors.Is(err, c.want) {
			t.Errorf("Dequantize(%s, %d bytes, %d) = %v, want %v", c.t, c.src, c.dst, err, c.want)
		}
	}
}
