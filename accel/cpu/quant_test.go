package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	"github.com/reprise-ml/reprise/quant"
)

// quantCall is a MatMul of T rows of x by W (out x in) quantized to dt, and
// W's dequantised values.
func quantCall(tb testing.TB, r *rand.Rand, dt accel.DType, T, out, in int) (*rcall, []float32, []float32) {
	tb.Helper()
	x := make([]float32, T*in)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	w := make([]float32, out*in)
	for i := range w {
		w[i] = float32(r.NormFloat64()) * 0.1
	}
	qt, _ := dt.Quant()
	wb := make([]byte, int64(out)*dt.RowBytes(in))
	if err := quant.Quantize(qt, w, wb); err != nil {
		tb.Fatal(err)
	}
	wd := make([]float32, out*in)
	if err := quant.Dequantize(qt, wb, wd); err != nil {
		tb.Fatal(err)
	}
	c := &rcall{op: accel.OpMatMul}
	c.o[0] = operand{b: make([]byte, 4*T*out), rows: T, cols: out, dt: accel.F32}
	c.o[1] = operand{b: accel.F32Bytes(x), rows: T, cols: in, dt: accel.F32}
	c.o[2] = operand{b: wb, rows: out, cols: in, dt: dt}
	return c, x, wd
}

var quantDTypes = []accel.DType{accel.Q8_0, accel.Q4_0, accel.Q4_K, accel.Q6_K}

// TestQuantMatMul: the quantized matmul is close to the product with the
// dequantised weights (the activations' 8-bit rounding is the difference),
// the vector and plain-Go kernels give the same bits, and a row's result is
// the same alone as in a batch.
func TestQuantMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, dt := range quantDTypes {
		for _, sh := range [][3]int{{1, 16, 256}, {3, 40, 512}, {5, 33, 768}, {9, 48, 256}} {
			T, out, in := sh[0], sh[1], sh[2]
			t.Run(fmt.Sprintf("%s/%dx%dx%d", dt, T, out, in), func(t *testing.T) {
				c, x, wd := quantCall(t, r, dt, T, out, in)
				run := func(vk *vecOps, c *rcall) []float32 {
					old, oldQ := vec.Load(), quantVec.Load()
					vec.Store(vk)
					quantVec.Store(false)
					defer func() { vec.Store(old); quantVec.Store(oldQ) }()
					k := &kctx{}
					return runRef(c, func(c *rcall, lo, hi int) { runMatMul(c, lo, hi, k) })
				}
				plain := run(nil, c)
				for row := 0; row < T; row++ {
					for o := 0; o < out; o++ {
						var ref, mag float64
						for i := 0; i < in; i++ {
							p := float64(x[row*in+i]) * float64(wd[o*in+i])
							ref += p
							mag += math.Abs(p)
						}
						// 8-bit activations: each product off by at most
						// half a step of its block's x scale.
						if got := float64(plain[row*out+o]); math.Abs(got-ref) > 0.02*mag+1e-6 {
							t.Fatalf("row %d out %d: %g, dequantised product %g (|.| sum %g)", row, o, got, ref, mag)
						}
					}
				}
				// Row by row: the same bits.
				for row := 0; row < T; row++ {
					c1 := *c
					c1.o[0] = operand{b: make([]byte, 4*out), rows: 1, cols: out, dt: accel.F32}
					c1.o[1] = operand{b: c.o[1].b[row*in*4 : (row+1)*in*4], rows: 1, cols: in, dt: accel.F32}
					if i, ok := bitsEqual(run(nil, &c1), plain[row*out:(row+1)*out]); !ok {
						t.Fatalf("row %d alone differs at %d", row, i)
					}
				}
				if !quantVecBuilt {
					return
				}
				if !quantPacks(dt) {
					return
				}
				oldQ := quantVec.Load()
				quantVec.Store(true)
				defer quantVec.Store(oldQ)
				for _, vk := range quantSets() {
					got := runQuantVecOn(t, vk, c)
					if i, ok := bitsEqual(got, plain); !ok {
						t.Fatalf("%s: vector kernels differ at %d: %g, plain Go %g", setName(vk), i, got[i], plain[i])
					}
				}
			})
		}
	}
}

// vecEqualsPlain fails t unless c's y on the quantized vector kernels of
// every kernel set this CPU runs (runQuantVecOn: the avx512 set's own
// where it has them, quant_vnni_amd64.go, else the AVX2 ones) has the bits
// of the plain-Go path's, and returns it (the last set's).
func vecEqualsPlain(t *testing.T, c *rcall) []float32 {
	t.Helper()
	old := quantVec.Load()
	defer quantVec.Store(old)
	quantVec.Store(false)
	k := &kctx{}
	plain := runRef(c, func(c *rcall, lo, hi int) { runMatMul(c, lo, hi, k) })
	quantVec.Store(true)
	var got []float32
	for _, vk := range quantSets() {
		got = runQuantVecOn(t, vk, c)
		if i, ok := bitsEqual(got, plain); !ok {
			out := c.o[0].cols
			t.Fatalf("%s: row %d out %d: %g, plain Go %g", setName(vk), i/out, i%out, got[i], plain[i])
		}
	}
	return got
}

// quantSets are the kernel sets the quantized tests run each of: every set
// this CPU runs, or, where it runs none (AVX2 without FMA), the plain-Go
// set (nil), whose quantized matmul still runs the AVX2 kernels.
func quantSets() []*vecOps {
	if s := vecSets(); len(s) > 0 {
		return s
	}
	return []*vecOps{nil}
}

// setName names a kernel set in a test's message.
func setName(vk *vecOps) string {
	if vk == nil {
		return "plain-Go set"
	}
	return vk.name
}

// runQuantVecOn is runQuantVec with the kernel set vk in use.
func runQuantVecOn(t *testing.T, vk *vecOps, c *rcall) []float32 {
	t.Helper()
	old := vec.Load()
	defer vec.Store(old)
	vec.Store(vk)
	return runQuantVec(t, c)
}

// runQuantVec runs c on the quantized vector kernels (quantVec on) over
// W's packed panels, in runRef's two pieces, and returns y.
func runQuantVec(t *testing.T, c *rcall) []float32 {
	t.Helper()
	return runQuantVecK(t, c, &kctx{})
}

// runQuantVecK is runQuantVec with the kernels' context k (its device's
// settings: prefetch.go).
func runQuantVecK(t *testing.T, c *rcall, k *kctx) []float32 {
	t.Helper()
	in, dt := c.o[1].cols, c.o[2].dt
	p := packWeights(c.o[2])
	return runRef(c, func(c *rcall, lo, hi int) {
		p0, p1, t0, t1 := matUnits(c, lo, hi)
		quantizeActs(&k.qa, c.o[1].f32(), in, t0, t1, kBlocks(dt))
		if !runMatMulQuantVec(c, &k.qa, p, p0, p1, t0, t1, k) {
			t.Fatal("no vector kernel")
		}
	})
}

// TestQuantizeActsVec: x quantized on the vector kernels equals the scalar
// functions' result bit for bit, for Q8_0 and Q8_K numerics, on random rows
// and on blocks made to hit the edges: all zeros, ±0, a largest magnitude
// with both signs (the first decides Q8_K's sign), infinities, NaNs, values
// on the rounding ties and subnormals.
func TestQuantizeActsVec(t *testing.T) {
	if !quantVecBuilt {
		t.Skip("no quantized vector kernels here")
	}
	r := rand.New(rand.NewPCG(7, 8))
	const in = 512
	var rows [][]float32
	for i := 0; i < 4; i++ {
		x := make([]float32, in)
		for j := range x {
			x[j] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(7)-3)))
		}
		rows = append(rows, x)
	}
	edge := func(f func(x []float32)) {
		x := make([]float32, in)
		for j := range x {
			x[j] = float32(r.NormFloat64())
		}
		f(x)
		rows = append(rows, x)
	}
	edge(func(x []float32) { clear(x[:256]) })
	edge(func(x []float32) {
		for j := range x[:256] {
			x[j] = float32(math.Copysign(0, float64(j%2)-0.5))
		}
	})
	edge(func(x []float32) { x[3], x[200] = -9, 9; x[300], x[301] = 9, -9 })
	edge(func(x []float32) { x[5] = float32(math.Inf(1)); x[290] = float32(math.Inf(-1)) })
	edge(func(x []float32) { x[7] = float32(math.NaN()); x[260] = -float32(math.NaN()) })
	edge(func(x []float32) {
		// amax 127: every value v·1 on a tie of the rounding.
		for j := range x {
			x[j] = float32(j%254-127) + 0.5
		}
		x[0], x[256] = 127, 127
	})
	edge(func(x []float32) {
		for j := range x {
			x[j] = math.Float32frombits(uint32(r.IntN(1 << 23)))
		}
	})
	// Every row at once too, so that the vector kernels' runs of eight
	// blocks (qExtremes) take blocks of different rows, and (Q8_0 only,
	// rows of 13 blocks) runs that end in fewer than eight.
	all := slices.Concat(rows...)
	type tcase struct {
		x      []float32
		in, t1 int
		k      bool
	}
	var cases []tcase
	for _, k := range []bool{false, true} {
		for _, x := range rows {
			cases = append(cases, tcase{x, in, 1, k})
		}
		cases = append(cases, tcase{all, in, len(rows), k})
	}
	cases = append(cases, tcase{all, 13 * 32, len(all) / (13 * 32), false}, tcase{all[:3*13*32], 13 * 32, 3, false})
	for i, tc := range cases {
		k, x, in := tc.k, tc.x, tc.in
		var want, got qacts
		old := quantVec.Load()
		quantVec.Store(false)
		quantizeActs(&want, x, in, 0, tc.t1, k)
		quantVec.Store(true)
		quantizeActs(&got, x, in, 0, tc.t1, k)
		quantVec.Store(old)
		for j := range want.qx {
			if got.qx[j] != want.qx[j] {
				t.Fatalf("k %v case %d: value %d: %d, scalar %d", k, i, j, got.qx[j], want.qx[j])
			}
		}
		for j := range want.dx {
			if math.Float32bits(got.dx[j]) != math.Float32bits(want.dx[j]) {
				t.Fatalf("k %v case %d: scale %d: %g, scalar %g", k, i, j, got.dx[j], want.dx[j])
			}
		}
		for j := range want.sx {
			if got.sx[j] != want.sx[j] {
				t.Fatalf("k %v case %d: sum %d: %d, scalar %d", k, i, j, got.sx[j], want.sx[j])
			}
		}
	}
}

// TestQuantMatMulRows: the multi-row vector kernels (several rows of x per
// pass over a weight panel) give every row the bits of the one-row plain-Go
// path, at every row count (1..9 cover each remainder of the four-row
// kernels; 13, 64 and 512 run on widened panels, quant_rows_amd64.go, and
// 64 and 512 are batched decode and prefill, split across pieces by rows or
// by panels) and at output counts that leave a partial last panel.
// A row's result thus does not depend on the batch it was served in.
func TestQuantMatMulRows(t *testing.T) {
	if !quantVecBuilt {
		t.Skip("no quantized vector kernels here")
	}
	r := rand.New(rand.NewPCG(9, 10))
	// 11, 12 and 13: either side of quantWideMin (amd64), with an odd row
	// and without.
	// 24 and 25: two whole groups of the Q8_0 and Q4_0 VNNI kernels' rows
	// (12) and three uneven ones.
	counts := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 24, 25, 64, 512}
	for _, dt := range quantDTypes {
		for _, T := range counts {
			for _, sh := range [][2]int{{40, 256}, {16, 512}} {
				out, in := sh[0], sh[1]
				if T == 512 && out != 40 {
					continue // one shape at 512 rows is enough (plain Go is slow under -race)
				}
				t.Run(fmt.Sprintf("%s/T%d/%dx%d", dt, T, out, in), func(t *testing.T) {
					c, _, _ := quantCall(t, r, dt, T, out, in)
					got := vecEqualsPlain(t, c)
					old := quantVec.Load()
					defer quantVec.Store(old)
					k := &kctx{}
					// The last row alone on the one-row plain-Go path.
					c1 := *c
					c1.o[0] = operand{b: make([]byte, 4*out), rows: 1, cols: out, dt: accel.F32}
					c1.o[1] = operand{b: c.o[1].b[(T-1)*in*4 : T*in*4], rows: 1, cols: in, dt: accel.F32}
					quantVec.Store(false)
					alone := runRef(&c1, func(c *rcall, lo, hi int) { runMatMul(c, lo, hi, k) })
					if i, ok := bitsEqual(got[(T-1)*out:], alone); !ok {
						t.Fatalf("last row alone differs at %d: %g, in the batch %g", i, alone[i], got[(T-1)*out+i])
					}
				})
			}
		}
	}
}

// TestQuantMatMulRowsExtremes: the vector kernels give the plain-Go bits on
// weights of random bytes (every value a file may hold: Q8_0's -128, every
// nibble and 6-bit value, every scale and min byte), the float16 scales
// finite, of either sign, zeros and subnormals among them (the panels hold
// them as float16, which the kernels widen: quant_amd64.go), and below 2^6
// (so that no sum overflows, whose infinities the kernels might add in
// another order), against rows of x whose quantized values are mostly ±127
// (the integer sums' largest pair sums and totals).
func TestQuantMatMulRowsExtremes(t *testing.T) {
	if !quantVecBuilt {
		t.Skip("no quantized vector kernels here")
	}
	r := rand.New(rand.NewPCG(11, 12))
	const out, in = 40, 512
	half := func(b []byte) {
		h := quant.FloatToHalf(float32(r.Float64()*0.02 + 0.001))
		switch r.IntN(4) {
		case 0: // any exponent up to 2^5 (0: zero or subnormal), either sign
			h = uint16(r.IntN(21)<<10 | r.IntN(1<<10) | r.IntN(2)<<15)
		case 1: // ±0, or a subnormal
			h = uint16(r.IntN(2)<<15) | uint16(r.IntN(2)*r.IntN(1<<10))
		case 2:
			h |= 0x8000
		}
		binary.LittleEndian.PutUint16(b, h)
	}
	for _, dt := range quantDTypes {
		for _, T := range []int{1, 4, 5, 9, 13, 64} {
			t.Run(fmt.Sprintf("%s/T%d", dt, T), func(t *testing.T) {
				c, _, _ := quantCall(t, r, dt, T, out, in)
				wb := c.o[2].b
				for i := range wb {
					wb[i] = byte(r.Uint32())
				}
				bs := int(dt.RowBytes(dt.BlockSize()))
				for b := 0; b < len(wb)/bs; b++ {
					blk := wb[b*bs : (b+1)*bs]
					switch dt {
					case accel.Q8_0, accel.Q4_0:
						half(blk)
					case accel.Q4_K:
						half(blk)
						half(blk[2:])
					case accel.Q6_K:
						half(blk[208:])
					}
				}
				x := c.o[1].f32()
				for i := range x {
					x[i] = float32(1 - 2*r.IntN(2))
					if r.IntN(16) == 0 {
						x[i] *= float32(r.Float64())
					}
					if (i/in)%2 == 0 {
						// x's scales half float16's largest (Q8_0
						// numerics: the Q8_0 and Q4_0 one-row kernels
						// multiply them by 2^112).
						x[i] *= 0x1p22
					}
				}
				vecEqualsPlain(t, c)
			})
		}
	}
}

// useQuantVec makes the test run the quantized vector kernels, restoring
// the switch after it, and skips it in builds that have none.
func useQuantVec(t *testing.T) {
	t.Helper()
	if !quantVecBuilt {
		t.Skip("no quantized vector kernels here")
	}
	old := quantVec.Load()
	quantVec.Store(true)
	t.Cleanup(func() { quantVec.Store(old) })
}

// TestQuantUnpackable: weights with an infinite or NaN float16 scale, which
// the panels' widening cannot hold (quantPackable), are not packed: the
// MatMul reads them row-major, with the plain-Go bits, and packs them once
// they have been rewritten with finite scales.
func TestQuantUnpackable(t *testing.T) {
	useQuantVec(t)
	r := rand.New(rand.NewPCG(19, 20))
	const T, out, in = 2, 24, 512
	for _, dt := range quantDTypes {
		for _, bad := range []uint16{0x7c00, 0xfc00, 0x7e01} {
			t.Run(fmt.Sprintf("%s/%#x", dt, bad), func(t *testing.T) {
				e := acceltest.Open(t, "cpu", accel.Options{Threads: 1})
				dev := e.Dev.(*Device)
				c, xv, _ := quantCall(t, r, dt, T, out, in)
				finite := append([]byte(nil), c.o[2].b...)
				off := map[accel.DType]int{accel.Q8_0: 0, accel.Q4_0: 0, accel.Q4_K: 2, accel.Q6_K: 208}[dt]
				bs := int(dt.RowBytes(dt.BlockSize()))
				binary.LittleEndian.PutUint16(c.o[2].b[3*bs+off:], bad)
				if quantPackable(c.o[2]) {
					t.Fatal("quantPackable: true")
				}
				plain := func(c *rcall) []float32 {
					quantVec.Store(false)
					defer quantVec.Store(true)
					k := &kctx{}
					return runRef(c, func(c *rcall, lo, hi int) { runMatMul(c, lo, hi, k) })
				}
				wb, err := e.Dev.Alloc(int64(len(finite)))
				if err != nil {
					t.Fatal(err)
				}
				w := accel.Tensor{Buf: wb, DType: dt, Rows: out, Cols: in}
				x, y := e.F32(xv, T, in), e.Zeros(accel.F32, T, out)
				matmul := func(wv []byte, uses int) {
					t.Helper()
					if err := accel.Upload(e.S, wb, wv); err != nil {
						t.Fatal(err)
					}
					c.o[2].b = wv
					want := plain(c)
					for i := 0; i < uses; i++ {
						l := accel.On(e.S)
						l.MatMul(y, x, w)
						if err := l.Err(); err != nil {
							t.Fatal(err)
						}
						if j, ok := bitsEqual(e.ReadF32(y), want); !ok {
							t.Fatalf("use %d: y[%d] = %g, plain Go %g", i, j, e.ReadF32(y)[j], want[j])
						}
					}
				}
				matmul(c.o[2].b, 3)
				if err := dev.PackWeights(w); err != nil {
					t.Fatal(err)
				}
				if n := dev.PackedBytes(); n != 0 {
					t.Fatalf("%d bytes packed from weights with a scale %#x", n, bad)
				}
				matmul(finite, volatileUses+1)
				if dev.PackedBytes() == 0 {
					t.Fatal("rewritten with finite scales, the weights were not packed")
				}
			})
		}
	}
}
