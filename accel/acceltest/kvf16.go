package acceltest

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/quant"
)

// testKVCacheF16 checks F16 KV caches against their definition: OpKVWrite
// rounds each element to the nearest binary16, ties to even, and
// OpAttention over F16 caches is OpAttention over F32 caches holding the
// widened values (bit for bit on a deterministic device). A device whose
// Capability lacks KVCacheF16 must refuse them with ErrUnsupported.
func testKVCacheF16(t *testing.T, backend string) {
	e := Open(t, backend, accel.Options{})
	r := rand.New(rand.NewPCG(16, 16))
	if !e.Dev.Capability().KVCacheF16 {
		kc := e.F16(make([]float32, 4*8), 4, 8)
		l := accel.On(e.S)
		l.KVWrite(kc, kc, e.F32(make([]float32, 8), 1, 8), e.F32(make([]float32, 8), 1, 8), e.I32([]int32{1}, 1, 1))
		if err := l.Err(); !errors.Is(err, accel.ErrUnsupported) {
			t.Fatalf("kv_write into an f16 cache on a device without KVCacheF16: %v, want ErrUnsupported", err)
		}
		t.Skip("no KVCacheF16")
	}
	// Shapes that reach each backend's kernels: narrow heads in pairs per
	// KV head, sixteen-wide heads, and 64-wide heads (the CPU device's
	// vector paths); each case has a prefill run, decode tokens and a
	// padding row.
	for _, c := range []attnCase{
		{h: 4, kvh: 2, hd: 8, page: 4, ppr: 4},
		{h: 4, kvh: 4, hd: 16, page: 4, ppr: 4},
		{h: 8, kvh: 2, hd: 64, page: 16, ppr: 2},
	} {
		kvd := c.kvh * c.hd
		c.slots = 8 * c.page
		// Row 0: a prefill of 10 tokens (a run long enough for the CPU
		// device's transposed keys) on pages 3, 1, 4; row 1: two decode
		// tokens near the end of pages 2, 5, 6 (of ppr); row 2: a padding
		// row on the sink page.
		c.pages = make([]int32, 3*c.ppr)
		for i := range min(3, c.ppr) {
			c.pages[i], c.pages[c.ppr+i] = []int32{3, 1, 4}[i], []int32{2, 5, 6}[i]
		}
		dec := int32(min(3, c.ppr)*c.page - 3)
		c.rows = []int32{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2}
		c.pos = []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, dec - 1, dec, 0}
		T := len(c.rows)
		slots := make([]int32, T)
		for i := range slots {
			row, p := int(c.rows[i]), int(c.pos[i])
			slots[i] = c.pages[row*c.ppr+p/c.page]*int32(c.page) + int32(p%c.page)
		}
		// The decode row's earlier positions are in the cache already.
		kcv, vcv := Rand(r, c.slots*kvd, 1), Rand(r, c.slots*kvd, 1)
		kv, vv := Rand(r, T*kvd, 1), Rand(r, T*kvd, 1)
		// Values binary16 rounds at its edges, in the padding row's
		// token, which attends only to itself: the largest finite value,
		// subnormals, a tie to even and a negative zero (overflow to
		// infinity is not among them: attention over it is NaN).
		pad := (T - 1) * kvd
		kv[pad], kv[pad+1], kv[pad+2], kv[pad+3] = 65504, 3e-6, -6e-8, float32(1+1.0/2048)
		vv[pad], vv[pad+1], vv[pad+2], vv[pad+3] = -65504, float32(math.Copysign(0, -1)), 1e-7, 65520
		kc, vc := e.F16(kcv, c.slots, kvd), e.F16(vcv, c.slots, kvd)
		_, kw := F16Bits(kcv)
		_, vw := F16Bits(vcv)
		l := accel.On(e.S)
		if l.KVWrite(kc, vc, e.F32(kv, T, kvd), e.F32(vv, T, kvd), e.I32(slots, 1, T)); l.Err() != nil {
			t.Fatalf("kv_write: %v", l.Err())
		}
		for i, s := range slots {
			for j := 0; j < kvd; j++ {
				kw[int(s)*kvd+j] = quant.HalfToFloat(quant.FloatToHalf(kv[i*kvd+j]))
				vw[int(s)*kvd+j] = quant.HalfToFloat(quant.FloatToHalf(vv[i*kvd+j]))
			}
		}
		if err := SameBits(e.ReadF16(kc), kw); err != nil {
			t.Fatalf("%+v: kv_write k: %v", c, err)
		}
		if err := SameBits(e.ReadF16(vc), vw); err != nil {
			t.Fatalf("%+v: kv_write v: %v", c, err)
		}
		qv := Rand(r, T*c.h*c.hd, 1)
		q := e.F32(qv, T, c.h*c.hd)
		sh := accel.AttentionShape{Heads: c.h, KVHeads: c.kvh, HeadSize: c.hd, PageSize: c.page}
		pages := e.I32(c.pages, 3, c.ppr)
		rows, pos := e.I32(c.rows, 1, T), e.I32(c.pos, 1, T)
		half, full := e.Zeros(accel.F32, T, c.h*c.hd), e.Zeros(accel.F32, T, c.h*c.hd)
		l.Attention(half, q, kc, vc, rows, pos, pages, sh)
		l.Attention(full, q, e.F32(kw, c.slots, kvd), e.F32(vw, c.slots, kvd), rows, pos, pages, sh)
		if err := l.Err(); err != nil {
			t.Fatalf("attention: %v", err)
		}
		got := e.ReadF32(half)
		if err := Same(e.Dev, got, e.ReadF32(full), 1e-5); err != nil {
			t.Errorf("%+v: attention over f16 caches against f32 caches of the widened values: %v", c, err)
		}
		if err := Close(got, refAttention(c, qv, kw, vw), 1e-3); err != nil {
			t.Errorf("%+v: attention over f16 caches against the reference: %v", c, err)
		}
		// The decode token alone gives the same bits as in the batch.
		one := e.Zeros(accel.F32, 1, c.h*c.hd)
		l.Attention(one, q.RowSlice(11, 12), kc, vc, e.I32([]int32{1}, 1, 1), e.I32([]int32{dec}, 1, 1), pages, sh)
		if err := Same(e.Dev, e.ReadF32(one), got[11*c.h*c.hd:12*c.h*c.hd], 1e-5); err != nil {
			t.Errorf("%+v: decode row alone: %v", c, err)
		}
	}
	// A cache pair of mixed types is refused.
	kc, vc := e.F16(make([]float32, 4*8), 4, 8), e.F32(make([]float32, 4*8), 4, 8)
	l := accel.On(e.S)
	l.KVWrite(kc, vc, e.F32(make([]float32, 8), 1, 8), e.F32(make([]float32, 8), 1, 8), e.I32([]int32{1}, 1, 1))
	if err := l.Err(); !errors.Is(err, accel.ErrInvalidArgument) {
		t.Errorf("kv_write into an f16 k and an f32 v cache: %v, want ErrInvalidArgument", err)
	}
}
