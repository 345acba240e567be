package acceltest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/quant"
)

// Quantized uploads v quantized to dt with ggml's reference quantizer as a
// rows x cols tensor, and returns it with the dequantised values.
func (e *Env) Quantized(dt accel.DType, v []float32, rows, cols int) (accel.Tensor, []float32) {
	e.T.Helper()
	qt, ok := dt.Quant()
	if !ok {
		e.T.Fatalf("%s is not a quantized dtype", dt)
	}
	b := make([]byte, int64(rows)*dt.RowBytes(cols))
	if err := quant.Quantize(qt, v, b); err != nil {
		e.T.Fatal(err)
	}
	deq := make([]float32, rows*cols)
	if err := quant.Dequantize(qt, b, deq); err != nil {
		e.T.Fatal(err)
	}
	buf, err := e.Dev.Alloc(int64(len(b)))
	if err != nil {
		e.T.Fatal(err)
	}
	if err := accel.Upload(e.S, buf, b); err != nil {
		e.T.Fatal(err)
	}
	return accel.Tensor{Buf: buf, DType: dt, Rows: rows, Cols: cols}, deq
}

// closeProducts checks y against x·deqᵀ: each output within frac of the sum
// of its products' magnitudes (a backend may quantize x to 8 bits per
// block first, whose rounding is a fraction of each block's largest value).
func closeProducts(got, x, deq []float32, rows, in, out int, frac float64) error {
	for t := 0; t < rows; t++ {
		for o := 0; o < out; o++ {
			var ref, mag float64
			for i := 0; i < in; i++ {
				p := float64(x[t*in+i]) * float64(deq[o*in+i])
				ref, mag = ref+p, mag+math.Abs(p)
			}
			if g := float64(got[t*out+o]); math.IsNaN(g) || math.Abs(g-ref) > frac*mag+1e-6 {
				return fmt.Errorf("row %d output %d: %g, dequantised product %g (magnitudes %g)", t, o, g, ref, mag)
			}
		}
	}
	return nil
}

// QuantDTypes are the block-quantized weight types every backend's MatMul
// takes.
var QuantDTypes = []accel.DType{accel.Q8_0, accel.Q4_0, accel.Q4_K, accel.Q6_K}

// testQuantMatMul: quantized weights multiply as their dequantised values
// (within the activation rounding a backend may do), a row alone gives
// its bits in a batch, and a captured product replays as eager.
func testQuantMatMul(t *testing.T, backend string) {
	e, pool := openCapture(t, backend)
	r := rand.New(rand.NewPCG(21, 22))
	for _, dt := range QuantDTypes {
		for _, sh := range [][3]int{{1, 16, 256}, {3, 40, 512}, {9, 33, 768}} {
			rows, out, in := sh[0], sh[1], sh[2]
			name := fmt.Sprintf("%s/%dx%dx%d", dt, rows, out, in)
			w, deq := e.Quantized(dt, Rand(r, out*in, 0.1), out, in)
			xv := Rand(r, rows*in, 1)
			x, y := e.F32(xv, rows, in), e.Zeros(accel.F32, rows, out)
			l := accel.On(e.S)
			l.MatMul(y, x, w)
			if l.Err() != nil {
				t.Fatalf("%s: %v", name, l.Err())
			}
			got := e.ReadF32(y)
			if err := closeProducts(got, xv, deq, rows, in, out, 0.02); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			y1 := e.Zeros(accel.F32, 1, out)
			l.MatMul(y1, x.RowSlice(rows-1, rows), w)
			if err := SameBits(e.ReadF32(y1), got[(rows-1)*out:]); err != nil {
				t.Errorf("%s: last row alone: %v", name, err)
			}
			yg := e.Zeros(accel.F32, rows, out)
			g, err := accel.Capture(e.S, pool, func() error {
				l := accel.On(e.S)
				l.MatMul(yg, x, w)
				return l.Err()
			})
			if err != nil {
				t.Fatalf("%s: capture: %v", name, err)
			}
			ex, err := g.Instantiate()
			if err != nil {
				t.Fatalf("%s: instantiate: %v", name, err)
			}
			for i := 0; i < 2; i++ {
				if err := ex.Launch(e.S); err != nil {
					t.Fatalf("%s: replay: %v", name, err)
				}
				if err := Same(e.Dev, e.ReadF32(yg), got, 1e-5); err != nil {
					t.Errorf("%s: replay %d against eager: %v", name, i, err)
				}
			}
			ex.Destroy()
			g.Destroy()
		}
	}
	// Columns that are not whole blocks are refused.
	w, _ := e.Quantized(accel.Q8_0, make([]float32, 64), 2, 32)
	bad := accel.Tensor{Buf: w.Buf, DType: accel.Q4_K, Rows: 1, Cols: 32}
	l := accel.On(e.S)
	l.MatMul(e.Zeros(accel.F32, 1, 1), e.Zeros(accel.F32, 1, 32), bad)
	if l.Err() == nil {
		t.Error("a Q4_K matrix of 32 columns was accepted")
	}
}
