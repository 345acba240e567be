package opencl_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	"github.com/reprise-ml/reprise/accel/cpu"
)

// pair runs the same kernels on the OpenCL device and on the CPU device.
type pair struct {
	t        *testing.T
	ocl, cpu *acceltest.Env
}

func newPair(t *testing.T) *pair {
	return &pair{t: t, ocl: open(t), cpu: acceltest.OpenCPU(t)}
}

type twin struct{ o, c accel.Tensor }

func (p *pair) f32(v []float32, rows, cols int) twin {
	return twin{p.ocl.F32(v, rows, cols), p.cpu.F32(v, rows, cols)}
}

func (p *pair) i32(v []int32, rows, cols int) twin {
	return twin{p.ocl.I32(v, rows, cols), p.cpu.I32(v, rows, cols)}
}

func (p *pair) bf16(v []float32, rows, cols int) twin {
	return twin{p.ocl.BF16(v, rows, cols), p.cpu.BF16(v, rows, cols)}
}

func (p *pair) zeros(dt accel.DType, rows, cols int) twin {
	return twin{p.ocl.Zeros(dt, rows, cols), p.cpu.Zeros(dt, rows, cols)}
}

// run launches fn on both devices with the OpenCL or the CPU halves.
func (p *pair) run(fn func(l *accel.Launcher, pick func(twin) accel.Tensor)) {
	p.t.Helper()
	for _, side := range []struct {
		e    *acceltest.Env
		pick func(twin) accel.Tensor
	}{{p.ocl, func(x twin) accel.Tensor { return x.o }}, {p.cpu, func(x twin) accel.Tensor { return x.c }}} {
		l := accel.On(side.e.S)
		fn(l, side.pick)
		if l.Err() != nil {
			p.t.Fatal(l.Err())
		}
	}
}

func (p *pair) readF32(x twin) (ocl, cpu []float32) { return p.ocl.ReadF32(x.o), p.cpu.ReadF32(x.c) }
func (p *pair) readI32(x twin) (ocl, cpu []int32)   { return p.ocl.ReadI32(x.o), p.cpu.ReadI32(x.c) }

// The kernels made only of IEEE additions and products (and data movement)
// give the CPU device's bits: the same order, and a fused multiply-add per
// term in the float32 and bf16 matmuls as on the CPU device where its build
// fuses them (cpu.FusedMatMul; fma() is correctly rounded). The rest use the device's exp, sin and cos and agree
// within tolerance.
func TestCPUParity(t *testing.T) {
	p := newPair(t)
	r := rand.New(rand.NewPCG(21, 22))
	bitwise := func(name string, x twin) {
		t.Helper()
		o, c := p.readF32(x)
		if err := acceltest.SameBits(o, c); err != nil {
			t.Errorf("%s against the CPU device: %v", name, err)
		}
	}
	close := func(name string, x twin, tol float64) {
		t.Helper()
		o, c := p.readF32(x)
		if err := acceltest.SameBits(o, c); err != nil {
			t.Logf("%s: not bitwise: %v", name, err)
		}
		if err := acceltest.Close(o, c, tol); err != nil {
			t.Errorf("%s against the CPU device: %v", name, err)
		}
	}

	const rows, d, f, v = 6, 48, 72, 33
	x := p.f32(acceltest.Rand(r, rows*d, 1), rows, d)
	w := p.f32(acceltest.Rand(r, f*d, 0.2), f, d)
	wb := p.bf16(acceltest.Rand(r, f*d, 0.2), f, d)
	nw := p.f32(acceltest.Rand(r, d, 1), 1, d)
	y, yb := p.zeros(accel.F32, rows, f), p.zeros(accel.F32, rows, f)
	p.run(func(l *accel.Launcher, s func(twin) accel.Tensor) {
		l.MatMul(s(y), s(x), s(w))
		l.MatMul(s(yb), s(x), s(wb))
	})
	if cpu.FusedMatMul() {
		bitwise("matmul", y)
		bitwise("matmul bf16", yb)
	} else {
		// This build's CPU device rounds each product before adding it;
		// fma() rounds once, so the two differ by rounding only.
		close("matmul", y, 1e-5)
		close("matmul bf16", yb, 1e-5)
	}

	n := p.zeros(accel.F32, rows, d)
	p.run(func(l *accel.Launcher, s func(twin) accel.Tensor) { l.RMSNorm(s(n), s(x), s(nw), 1e-5) })
	close("rmsnorm", n, 1e-6)

	a, b, o := p.f32(acceltest.Rand(r, 999, 3), 1, 999), p.f32(acceltest.Rand(r, 999, 3), 1, 999), p.zeros(accel.F32, 1, 999)
	p.run(func(l *accel.Launcher, s func(twin) accel.Tensor) { l.Add(s(o), s(a), s(b)) })
	bitwise("add", o)
	p.run(func(l *accel.Launcher, s func(twin) accel.Tensor) { l.SiLUMul(s(o), s(a), s(b)) })
	close("silu_mul", o, 1e-6)

	tab := p.f32(acceltest.Rand(r, v*d, 1), v, d)
	tabB := p.bf16(acceltest.Rand(r, v*d, 1), v, d)
	ids := p.i32([]int32{0, 32, 33, -5, 7, 7}, 1, rows)
	e1, e2 := p.zeros(accel.F32, rows, d), p.zeros(accel.F32, rows, d)
	g := p.zeros(accel.F32, 3, d)
	p.run(func(l *accel.Launcher, s func(twin) accel.Tensor) {
		l.Embed(s(e1), s(tab), s(ids))
		l.Embed(s(e2), s(tabB), s(ids))
		l.GatherRows(s(g), s(x), s(p.i32x([]int32{5, 6, 0})))
	})
	bitwise("embed", e1)
	bitwise("embed bf16", e2)
	bitwise("gather_rows", g)

	fi := p.zeros(accel.I32, 3, 7)
	ff := p.zeros(accel.F32, 2, 5)
	p.run(func(l *accel.Launcher, s func(twin) accel.Tensor) {
		l.FillI32(s(fi), -3)
		l.FillF32(s(ff), float32(math.Inf(-1)))
	})
	fo, fc := p.readI32(fi)
	if !slices.Equal(fo, fc) {
		t.Errorf("fill i32: %v, CPU %v", fo, fc)
	}
	bitwise("fill f32", ff)

	// RoPE, KV write and attention over a paged cache.
	const h, kvh, hd, page, ppr, tokens = 4, 2, 16, 4, 4, 5
	slots := 6 * page
	q := p.f32(acceltest.Rand(r, tokens*h*hd, 1), tokens, h*hd)
	k := p.f32(acceltest.Rand(r, tokens*kvh*hd, 1), tokens, kvh*hd)
	vv := p.f32(acceltest.Rand(r, tokens*kvh*hd, 1), tokens, kvh*hd)
	pos := []int32{0, 1, 2, 9, 0}
	rowsOf := []int32{0, 0, 0, 1, 2}
	pages := []int32{2, 0, 0, 0, 4, 1, 3, 0, 0, 0, 0, 0}
	sl := make([]int32, tokens)
	for i := range sl {
		sl[i] = pages[int(rowsOf[i])*ppr+int(pos[i])/page]*page + pos[i]%page
	}
	sl[4] = -1 // a padding token writes nothing
	kc := p.f32(acceltest.Rand(r, slots*kvh*hd, 1), slots, kvh*hd)
	vc := p.f32(acceltest.Rand(r, slots*kvh*hd, 1), slots, kvh*hd)
	posT, rowT, pageT, slotT := p.i32x(pos), p.i32x(rowsOf), p.i32(pages, 3, ppr), p.i32x(sl)
	att := p.zeros(accel.F32, tokens, h*hd)
	p.run(func(l *accel.Launcher, s func(twin) accel.Tensor) {
		l.RoPE(s(q), s(k), s(posT), hd, 10000)
	})
	close("rope q", q, 1e-5)
	close("rope k", k, 1e-5)
	// From here on both sides start from the same q and k.
	qo, _ := p.readF32(q)
	ko, _ := p.readF32(k)
	q, k = p.f32(qo, tokens, h*hd), p.f32(ko, tokens, kvh*hd)
	p.run(func(l *accel.Launcher, s func(twin) accel.Tensor) {
		l.KVWrite(s(kc), s(vc), s(k), s(vv), s(slotT))
		l.Attention(s(att), s(q), s(kc), s(vc), s(rowT), s(posT), s(pageT),
			accel.AttentionShape{Heads: h, KVHeads: kvh, HeadSize: hd, PageSize: page})
	})
	bitwise("kv_write k", kc)
	bitwise("kv_write v", vc)
	close("attention", att, 1e-5)

	lg := p.f32(acceltest.Rand(r, 4*v, 2), 4, v)
	am := p.zeros(accel.I32, 1, 4)
	p.run(func(l *accel.Launcher, s func(twin) accel.Tensor) { l.Argmax(s(am), s(lg)) })
	ao, ac := p.readI32(am)
	if !slices.Equal(ao, ac) {
		t.Errorf("argmax %v, CPU %v", ao, ac)
	}
}

// i32x uploads a vector.
func (p *pair) i32x(v []int32) twin { return p.i32(v, 1, len(v)) }

// Without top-k and top-p, a draw walks the distribution in index order on
// both devices: the same (logits, seed, offset) picks the same token but
// where the device's exp moves a boundary.
func TestSampleMatchesCPU(t *testing.T) {
	p := newPair(t)
	r := rand.New(rand.NewPCG(31, 32))
	const R, V, draws = 8, 64, 100
	lg := p.f32(acceltest.Rand(r, R*V, 2), R, V)
	temps := []float32{1, 0.5, 1.5, 0.8, 1, 2, 0.3, 1}
	seeds := make([]int32, 2*R)
	for i := 0; i < R; i++ {
		seeds[2*i], seeds[2*i+1] = accel.SplitSeed(r.Uint64())
	}
	par := func(off int32) (accel.SampleParams, accel.SampleParams) {
		offs := make([]int32, R)
		for i := range offs {
			offs[i] = off + int32(i)
		}
		tt, tk, tp := p.f32(temps, 1, R), p.i32x(make([]int32, R)), p.f32(acceltest.Ones(R), 1, R)
		sd, of := p.i32(seeds, R, 2), p.i32x(offs)
		return accel.SampleParams{Temperature: tt.o, TopK: tk.o, TopP: tp.o, Seed: sd.o, Offset: of.o},
			accel.SampleParams{Temperature: tt.c, TopK: tk.c, TopP: tp.c, Seed: sd.c, Offset: of.c}
	}
	out := p.zeros(accel.I32, 1, R)
	same, total := 0, 0
	for i := 0; i < draws; i++ {
		po, pc := par(int32(i * R))
		l := accel.On(p.ocl.S)
		l.Sample(out.o, lg.o, po)
		lc := accel.On(p.cpu.S)
		lc.Sample(out.c, lg.c, pc)
		if l.Err() != nil || lc.Err() != nil {
			t.Fatal(l.Err(), lc.Err())
		}
		o, c := p.readI32(out)
		for j := range o {
			total++
			if o[j] == c[j] {
				same++
			}
		}
	}
	if same < total*98/100 {
		t.Errorf("%d of %d draws agree with the CPU device", same, total)
	}
	t.Logf("%d of %d draws agree with the CPU device", same, total)
}
