package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/quant"
)

// halfInputs are float32s to round to binary16: every binary16's value,
// each rounding boundary between neighbours (the midpoint, where ties go
// to even) and the float32s either side of it, the edges of the range,
// specials, and random bits.
func halfInputs(r *rand.Rand) []float32 {
	var v []float32
	for h := 0; h < 1<<16; h++ {
		f := quant.HalfToFloat(uint16(h))
		v = append(v, f)
		if h&0x7fff >= 0x7c00 {
			continue
		}
		next := float64(quant.HalfToFloat(uint16(h + 1)))
		if h&0x7fff == 0x7bff {
			next = math.Copysign(65536, float64(f)) // the boundary to infinity
		}
		mid := float32((float64(f) + next) / 2) // exact: 12 significant bits
		v = append(v, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, float32(math.Inf(1))), math.Nextafter32(mid, float32(math.Inf(-1))))
	}
	v = append(v, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-45, -1e-45, 1e38, -1e38, 5.9604645e-8, 2.9802322e-8)
	for range 200000 {
		v = append(v, math.Float32frombits(r.Uint32()), float32(r.NormFloat64()))
	}
	return v
}

// TestHalfConversions: the conversions the F16 KV cache uses (VCVTPS2PH and
// VCVTPH2PS where the CPU has F16C) give quant's bits: every binary16
// widened (a NaN as a NaN), and rounding at every boundary, at lengths
// whose tails the vector loops leave to Go.
func TestHalfConversions(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 16))
	in := halfInputs(r)
	for _, n := range []int{len(in), len(in) - 1, 7, 9, 17} {
		got := make([]uint16, n)
		narrowHalf(got, in[:n])
		for i, h := range got {
			want := quant.FloatToHalf(in[i])
			if h != want && !(isHalfNaN(h) && isHalfNaN(want)) {
				t.Fatalf("narrow %v (bits %#x): %#04x, want %#04x", in[i], math.Float32bits(in[i]), h, want)
			}
		}
	}
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	for _, n := range []int{len(all), len(all) - 3, 15} {
		got := make([]float32, n)
		widenHalf(got, all[:n])
		for i, f := range got {
			want := quant.HalfToFloat(all[i])
			if math.Float32bits(f) != math.Float32bits(want) && !(f != f && want != want) {
				t.Fatalf("widen %#04x: %v (bits %#x), want %v (bits %#x)", all[i], f, math.Float32bits(f), want, math.Float32bits(want))
			}
		}
	}
}

func isHalfNaN(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }

// halfCache turns call c's float32 KV cache into binary16: the F16
// operands of the same rows, and c's own caches rounded to what they widen
// to, so that c computes the F16 call's reference.
func halfCache(c *rcall) *rcall {
	h := *c
	for _, i := range []int{2, 3} {
		f := c.o[i].f32()
		b := make([]byte, 2*len(f))
		u := unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(f))
		narrowHalfGo(u, f)
		widenHalfGo(f, u)
		h.o[i] = operand{b: b, rows: c.o[i].rows, cols: c.o[i].cols, dt: accel.F16}
	}
	return &h
}

// TestAttentionF16 runs attention over F16 caches on every path of every
// kernel set (decode tokens on the sixteen-lane and eight-wide-head paths
// and the general one, prefill runs with transposed keys, grouped KV
// heads, pieces split inside a token's heads) and checks the bits against
// the same call over F32 caches holding the widened values; and the F16
// KV write against quant's rounding.
func TestAttentionF16(t *testing.T) {
	sets := map[string]*vecOps{"plain Go": nil}
	for _, vk := range vecSets() {
		sets[vk.name] = vk
		general := *vk
		general.attnDec, general.attn8, general.attnDecHalf = nil, nil, nil
		sets[vk.name+" general"] = &general
	}
	type shape struct{ T, nh, nkv, hd, page, ctx int }
	calls := map[string]*rcall{}
	for _, s := range []shape{{3, 4, 4, 64, 16, 40}, {4, 8, 2, 64, 16, 33}, {2, 4, 4, 128, 16, 21}, {3, 4, 2, 8, 4, 19}, {2, 2, 2, 16, 8, 9}} {
		r := rand.New(rand.NewPCG(uint64(s.hd), uint64(s.ctx)))
		calls[fmt.Sprintf("decode/T%d/h%d/kv%d/hd%d/ctx%d", s.T, s.nh, s.nkv, s.hd, s.ctx)] = attnCall(r, s.T, s.nh, s.nkv, s.hd, s.page, s.ctx)
	}
	r := rand.New(rand.NewPCG(3, 4))
	calls["prefill/[37 5]/h4/kv2/hd64"] = prefillAttnCall(r, []int{37, 5}, 4, 2, 64, 16, true)
	calls["prefill/[19]/h2/kv2/hd8"] = prefillAttnCall(r, []int{19}, 2, 2, 8, 4, false)
	for name, c := range calls {
		h := halfCache(c)
		units, _ := unitsAttention(c)
		for sn, vk := range sets {
			for _, cuts := range [][]int{{0, units}, {0, units / 3, units - 1, units}} {
				want := runAttnPieces(c, vk, cuts)
				sameAttnBits(t, fmt.Sprintf("%s, %s, cuts %v", name, sn, cuts), runAttnPieces(h, vk, cuts), want)
			}
		}
	}
}
