package cpu

import (
	"encoding/binary"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/quant"
)

// Packed quantized panels (read by the vector kernels, quant_amd64.go).
//
// A panel is 16 consecutive outputs; for each block of 32 inputs it holds
// the 16 outputs' scales, then the values laid across outputs: 32-bit lane
// o of a 64-byte vector holds four consecutive inputs of output o, one per
// byte, so that a broadcast of four bytes of x and one VPMADDUBSW/VPMADDWD
// pair give each output's four-input sum in its own lane. The scales are
// the file's float16 (a panel's sixteen in 32 bytes, output o's at
// 2·f16Pos(o)), which the kernels widen to float32 exactly (quant_amd64.go's
// f16Hi): a batch-1 step reads the panels from memory where the model
// outgrows the cache, and float32 scales were 5-11% more bytes than ggml's
// blocks (Q4_0 160 bytes per output and 256 inputs, Q8_0 288, Q4_K 152,
// Q6_K 212). quantPackable says which files cannot be packed so.
//   - Q4_0: the scales as float16 (32 bytes), then 4 vectors; vector v's
//     low nibbles are inputs 4v..4v+3 of the block, its high nibbles inputs
//     4(v+4)..4(v+4)+3, as ggml's unsigned values (the -8 is taken out with
//     the sum of x). 144 bytes per output and 256 inputs, as ggml's.
//   - Q8_0: the scales as float16 (32 bytes), then 8 vectors of the values
//     plus 128 (unsigned bytes; the +128 is taken out with the sum of x),
//     vector g holding inputs 4g..4g+3. 272 bytes per output and 256
//     inputs, as ggml's.
//
// The K-quants' blocks are super-blocks of 256 inputs:
//   - Q4_K: d and dmin (16 float16 each), the eight 6-bit scales and mins
//     as bytes (sub-block s: 16 each, one per output; 148 bytes per output
//     and super-block, ggml 144, whose scales and mins are 12 bytes of six
//     bits each), then for each pair of
//     sub-blocks (2c, 2c+1) 8 vectors: vector g's low nibbles are inputs
//     4g..4g+3 of sub-block 2c, its high nibbles those of sub-block 2c+1.
//   - Q6_K: d (16 float16), the sixteen int8 scales (16 bytes per
//     sub-block of 16 inputs, one per output), then the 6-bit values
//     inverted, q' = 63-q (0..63; the kernels take the 31 of 63-q-32 out with
//     the sums of x), three vectors per sub-block s: vector 3s+j (j = 0..2)
//     holds in its bytes' low six bits the values of inputs 16s+4j..16s+4j+3
//     and in their top two bits bits 2j..2j+1 of those of inputs
//     16s+12..16s+15 (group 4s+3). Four values from three bytes take one
//     AND each for three of them and three shifts, three ANDs and two ORs
//     for the fourth: eleven for four, where ggml's four low bits and two
//     high ones, as this layout kept them before, took seventeen (five
//     shifts, eight ANDs, four ORs; docs/BENCH.md). 210 bytes per output
//     and super-block, as ggml's.
//
// A partial last panel's missing outputs are zero scales and values.

// quantPackable reports whether W's blocks fit dt's panels: every float16
// scale finite, as the kernels' widening needs (quant_amd64.go's f16Hi).
// A file with an infinite or NaN scale (none that a quantizer writes) is
// read by the row-major kernels, with the same bits.
func quantPackable(w operand) bool {
	var offs []int // the scales' offsets in a block
	switch w.dt {
	case accel.Q4_0, accel.Q8_0:
		offs = []int{0}
	case accel.Q4_K:
		offs = []int{0, 2}
	case accel.Q6_K:
		offs = []int{208}
	default:
		return true
	}
	bs := int(w.dt.RowBytes(w.dt.BlockSize()))
	for b := 0; b+bs <= len(w.b); b += bs {
		for _, o := range offs {
			if binary.LittleEndian.Uint16(w.b[b+o:])&0x7c00 == 0x7c00 {
				return false
			}
		}
	}
	return true
}

// f16Pos is where among a panel's sixteen float16 scales output o's is: the
// kernels widen them by VPUNPCKLWD, which makes outputs 0..7 of words 0..3
// and 8..11 (the low four of each 128-bit half), and VPUNPCKHWD, outputs
// 8..15 of words 4..7 and 12..15 (quant_amd64.go), so outputs 4..7 are
// held at 8..11 and 8..11 at 4..7.
func f16Pos(o int) int { return o&3 | (o&4)<<1 | (o&8)>>1 }

// quantPacks reports whether dt has packed panels (and vector kernels).
func quantPacks(dt accel.DType) bool { return quantBlockBytes(dt) > 0 }

// quantBlockBytes is the packed bytes of one block of one panel.
func quantBlockBytes(dt accel.DType) uintptr {
	switch dt {
	case accel.Q4_0:
		return 32 + 4*64
	case accel.Q8_0:
		return 32 + 8*64
	case accel.Q4_K:
		return 2*32 + 2*8*16 + 32*64
	case accel.Q6_K:
		return 32 + 16*16 + 32*64 + 16*64
	}
	return 0
}

func quantPanelBytes(dt accel.DType, in int) uintptr {
	return uintptr(in/dt.BlockSize()) * quantBlockBytes(dt)
}

// packQuant fills p's panels from W's ggml blocks.
//
//go:norace
func packQuant(w operand, p *packed) {
	in := w.cols
	nb := in / w.dt.BlockSize()
	rb := int(w.dt.RowBytes(in))
	bb := int(quantBlockBytes(w.dt))
	for o := 0; o < w.rows; o++ {
		pan, lane := o/panelWidth, o%panelWidth
		row := w.b[o*rb : (o+1)*rb]
		for b := 0; b < nb; b++ {
			dst := p.data[pan*int(p.ps)+b*bb : pan*int(p.ps)+(b+1)*bb]
			var v [32]byte // the block's 32 values, unsigned
			switch w.dt {
			case accel.Q4_0:
				blk := row[b*18 : b*18+18]
				copy(dst[2*f16Pos(lane):], blk[:2])
				for j := 0; j < 16; j++ {
					v[j], v[j+16] = blk[2+j]&0xf, blk[2+j]>>4
				}
				for vec := 0; vec < 4; vec++ {
					for kk := 0; kk < 4; kk++ {
						dst[32+64*vec+4*lane+kk] = v[4*vec+kk] | v[4*(vec+4)+kk]<<4
					}
				}
			case accel.Q8_0:
				blk := row[b*34 : b*34+34]
				copy(dst[2*f16Pos(lane):], blk[:2])
				for g := 0; g < 8; g++ {
					for kk := 0; kk < 4; kk++ {
						dst[32+64*g+4*lane+kk] = blk[2+4*g+kk] ^ 0x80
					}
				}
			case accel.Q4_K:
				blk := row[b*144 : b*144+144]
				copy(dst[2*f16Pos(lane):], blk[:2])
				copy(dst[32+2*f16Pos(lane):], blk[2:4])
				for sb := 0; sb < 8; sb++ {
					sc, m := quant.ScaleMinK4(sb, blk[4:16])
					dst[64+16*sb+lane], dst[192+16*sb+lane] = sc, m
				}
				q := blk[16:144]
				for c := 0; c < 4; c++ {
					for g := 0; g < 8; g++ {
						for kk := 0; kk < 4; kk++ {
							// ggml: byte 32c+l holds input l of sub-block 2c (low
							// nibble) and of 2c+1 (high): the same pairing.
							dst[320+64*(8*c+g)+4*lane+kk] = q[32*c+4*g+kk]
						}
					}
				}
			case accel.Q6_K:
				blk := row[b*210 : b*210+210]
				copy(dst[2*f16Pos(lane):], blk[208:210])
				for sb := 0; sb < 16; sb++ {
					dst[32+16*sb+lane] = blk[192+sb]
				}
				// The values inverted (q' = 63-q, see the layout above), then
				// laid out per sub-block.
				var q [256]byte
				ql, qh := blk[0:128], blk[128:192]
				for e := 0; e < 256; e++ {
					n, kq, l := e/128, (e%128)/32, e%32
					lo := ql[64*n+32*(kq&1)+l]
					if kq >= 2 {
						lo >>= 4
					}
					q[e] = 63 - (lo&0xf | ((qh[32*n+l]>>(2*kq))&3)<<4)
				}
				for s := 0; s < 16; s++ {
					for j := 0; j < 3; j++ {
						for kk := 0; kk < 4; kk++ {
							dst[288+64*(3*s+j)+4*lane+kk] = q[16*s+4*j+kk] | (q[16*s+12+kk]>>(2*j)&3)<<6
						}
					}
				}
			}
		}
	}
}
