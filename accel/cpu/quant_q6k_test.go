package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/quant"
)

// q6Block encodes one Q6_K super-block in ggml's layout from its 6-bit
// values q (0..63, in input order), sub-block scales and d.
func q6Block(q *[256]uint8, sc *[16]int8, d float32) []byte {
	blk := make([]byte, 210)
	ql, qh := blk[0:128], blk[128:192]
	for n := 0; n < 2; n++ {
		for l := 0; l < 32; l++ {
			e := 128*n + l
			ql[64*n+l] = q[e]&0xf | (q[e+64]&0xf)<<4
			ql[64*n+32+l] = q[e+32]&0xf | (q[e+96]&0xf)<<4
			qh[32*n+l] = q[e]>>4 | (q[e+32]>>4)<<2 | (q[e+64]>>4)<<4 | (q[e+96]>>4)<<6
		}
	}
	for s, v := range sc {
		blk[192+s] = byte(v)
	}
	binary.LittleEndian.PutUint16(blk[208:], quant.FloatToHalf(d))
	return blk
}

// TestQuantQ6_KBounds: Q6_K's integer sums are exact at the extremes of
// every term, on the plain-Go path and on each vector kernel (one-row,
// two- and three-row, widened), against an independent sum of sc·(q-32)·x.
// x is given as quantized rows directly (qacts), so that it holds values
// Q8_K never makes from floats (-128) as well as ±127 throughout a
// sub-block: the VPMADDUBSW pair sums of the inverted values 63-q (two
// groups summed in int16, 4·63·128 < 2^15), -31·Σx_s at Σx_s = -2048 and
// 2032 (q6Pairs' two int16 halves; a single int16 would not hold it), and
// scales of -128 and 127. 24 outputs leave a partial last panel; 12 and
// 13 rows run on widened panels (quantWideMin, amd64).
func TestQuantQ6_KBounds(t *testing.T) {
	const out, in = 24, 512
	const nb = in / 256
	r := rand.New(rand.NewPCG(15, 16))
	// W: output o's super-block b from pattern o%7.
	wq := make([][256]uint8, out*nb)
	wsc := make([][16]int8, out*nb)
	wd := make([]float32, out*nb)
	wb := make([]byte, 0, out*nb*210)
	for o := 0; o < out; o++ {
		for b := 0; b < nb; b++ {
			q, sc := &wq[o*nb+b], &wsc[o*nb+b]
			for e := range q {
				s := e / 16
				switch o % 7 {
				case 0, 1:
					q[e] = 0
				case 2, 3:
					q[e] = 63
				case 4:
					q[e] = uint8(63 * (s % 2))
				case 5:
					q[e] = uint8(r.IntN(64))
				case 6:
					q[e] = uint8(e % 64)
				}
			}
			for s := range sc {
				switch o % 7 {
				case 0, 3:
					sc[s] = 127
				case 1, 2:
					sc[s] = -128
				case 4:
					sc[s] = int8(127 - 255*(s%2))
				default:
					sc[s] = int8(r.IntN(256) - 128)
				}
			}
			wd[o*nb+b] = quant.HalfToFloat(quant.FloatToHalf(float32(1+o) / 64))
			wb = append(wb, q6Block(q, sc, wd[o*nb+b])...)
		}
	}
	// x: row t's values from pattern (p+t)%6.
	xval := func(pat, i int) int8 {
		s := i / 16
		switch pat {
		case 0:
			return -128
		case 1:
			return 127
		case 2:
			return int8(-128 + 255*(s%2))
		case 3:
			return int8(-128 + 255*(i%2))
		case 4:
			return int8(-128 + 255*r.IntN(2))
		}
		return int8(r.IntN(256) - 128)
	}
	for p := 0; p < 6; p++ {
		for _, T := range []int{1, 2, 3, 5, 12, 13} {
			t.Run(fmt.Sprintf("x%d/T%d", p, T), func(t *testing.T) {
				var a qacts
				a.qx = make([]int8, T*in)
				a.dx = make([]float32, T*nb)
				a.sx = make([]int32, T*in/16)
				for row := 0; row < T; row++ {
					for i := 0; i < in; i++ {
						v := xval((p+row)%6, i)
						a.qx[row*in+i] = v
						a.sx[(row*in+i)/16] += int32(v)
					}
					for b := 0; b < nb; b++ {
						a.dx[row*nb+b] = float32(1+row+b) / 128
					}
				}
				want := make([]float32, T*out)
				for row := 0; row < T; row++ {
					for o := 0; o < out; o++ {
						var acc float32
						for b := 0; b < nb; b++ {
							var A int64
							for s := 0; s < 16; s++ {
								var is int64
								for i := 16 * s; i < 16*s+16; i++ {
									is += (int64(wq[o*nb+b][i]) - 32) * int64(a.qx[row*in+256*b+i])
								}
								A += int64(wsc[o*nb+b][s]) * is
							}
							acc += float32(float32(wd[o*nb+b]*a.dx[row*nb+b]) * float32(A))
						}
						want[row*out+o] = acc
						got := dotQ6_K(wb[o*nb*210:(o+1)*nb*210], a.qx[row*in:(row+1)*in], a.dx[row*nb:])
						if math.Float32bits(got) != math.Float32bits(acc) {
							t.Fatalf("plain Go: row %d out %d: %g, want %g", row, o, got, acc)
						}
					}
				}
				if !quantVecBuilt {
					return
				}
				old := quantVec.Load()
				quantVec.Store(true)
				defer quantVec.Store(old)
				c := &rcall{op: accel.OpMatMul}
				c.o[0] = operand{b: make([]byte, 4*T*out), rows: T, cols: out, dt: accel.F32}
				c.o[1] = operand{b: make([]byte, 4*T*in), rows: T, cols: in, dt: accel.F32}
				c.o[2] = operand{b: wb, rows: out, cols: in, dt: accel.Q6_K}
				pk := packWeights(c.o[2])
				k := &kctx{qa: a}
				if !runMatMulQuantVec(c, &k.qa, pk, 0, pk.panels, 0, T, k) {
					t.Fatal("no vector kernel")
				}
				if i, ok := bitsEqual(c.o[0].f32(), want); !ok {
					t.Fatalf("vector kernels: row %d out %d: %g, want %g", i/out, i%out, c.o[0].f32()[i], want[i])
				}
			})
		}
	}
}
