package acceltest

import (
	"math"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/quant"
)

// BF16Bits truncates v to bfloat16: the little-endian bits a BF16 tensor
// holds, and the float32 values they widen to exactly.
func BF16Bits(v []float32) (bits []byte, widened []float32) {
	bits = make([]byte, 2*len(v))
	widened = make([]float32, len(v))
	for i, x := range v {
		u := uint16(math.Float32bits(x) >> 16)
		widened[i] = math.Float32frombits(uint32(u) << 16)
		bits[2*i], bits[2*i+1] = byte(u), byte(u>>8)
	}
	return bits, widened
}

// BF16 uploads v, truncated to bfloat16 (BF16Bits), as a rows x cols tensor.
func (e *Env) BF16(v []float32, rows, cols int) accel.Tensor {
	e.T.Helper()
	bits, _ := BF16Bits(v)
	return e.upload(bits, accel.BF16, rows, cols)
}

// upload allocates and fills a rows x cols tensor of dt with bits.
func (e *Env) upload(bits []byte, dt accel.DType, rows, cols int) accel.Tensor {
	e.T.Helper()
	buf, err := e.Dev.Alloc(int64(len(bits)))
	if err != nil {
		e.T.Fatal(err)
	}
	if err := accel.Upload(e.S, buf, bits); err != nil {
		e.T.Fatalf("upload: %v", err)
	}
	return accel.Tensor{Buf: buf, DType: dt, Rows: rows, Cols: cols}
}

// F16Bits rounds v to binary16 (quant.FloatToHalf): the little-endian bits
// an F16 tensor holds, and the float32 values they widen to exactly.
func F16Bits(v []float32) (bits []byte, widened []float32) {
	bits = make([]byte, 2*len(v))
	widened = make([]float32, len(v))
	for i, x := range v {
		h := quant.FloatToHalf(x)
		widened[i] = quant.HalfToFloat(h)
		bits[2*i], bits[2*i+1] = byte(h), byte(h>>8)
	}
	return bits, widened
}

// F16 uploads v, rounded to binary16 (F16Bits), as a rows x cols tensor.
func (e *Env) F16(v []float32, rows, cols int) accel.Tensor {
	e.T.Helper()
	bits, _ := F16Bits(v)
	return e.upload(bits, accel.F16, rows, cols)
}

// ReadF16 downloads an F16 tensor widened to float32.
func (e *Env) ReadF16(t accel.Tensor) []float32 {
	e.T.Helper()
	b, err := accel.Download(e.S, t.Buf.Slice(0, t.Bytes()))
	if err != nil {
		e.T.Fatalf("download: %v", err)
	}
	v := make([]float32, len(b)/2)
	for i := range v {
		v[i] = quant.HalfToFloat(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
	}
	return v
}

// Ones returns n ones.
func Ones(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

// OpenCPU opens the CPU device, the reference other devices are compared
// with. The suite opens it by name, so the test binary must register it: a
// backend's tests blank-import github.com/reprise-ml/reprise/accel/cpu.
func OpenCPU(t testing.TB) *Env {
	t.Helper()
	if _, err := accel.Lookup("cpu"); err != nil {
		t.Fatalf("comparing with the CPU device needs it registered: blank-import github.com/reprise-ml/reprise/accel/cpu in this package's tests (%v)", err)
	}
	return Open(t, "cpu", accel.Options{})
}

// SampleCandidates is the float64 reference of OpSample's candidate set for
// one row of logits at temperature temp > 0: the top-k by logit (k <= 0 or
// k >= len(row): all; ties to the lower index), then the smallest leading
// run of those whose probability reaches topP (topP <= 0 or >= 1: all), each
// with its probability renormalised over the set.
func SampleCandidates(row []float32, temp float32, k int, topP float32) map[int]float64 {
	v := len(row)
	p := make([]float64, v)
	m := math.Inf(-1)
	for _, x := range row {
		m = math.Max(m, float64(x/temp))
	}
	var sum float64
	for i, x := range row {
		p[i] = math.Exp(float64(x/temp) - m)
		sum += p[i]
	}
	idx := make([]int, v)
	for i := range idx {
		idx[i] = i
		p[i] /= sum
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case row[a] > row[b]:
			return -1
		case row[a] < row[b]:
			return 1
		}
		return a - b
	})
	n := v
	if k > 0 && k < v {
		n = k
	}
	if topP > 0 && topP < 1 {
		var cum float64
		for i := 0; i < n; i++ {
			cum += p[idx[i]]
			if cum >= float64(topP) {
				n = i + 1
				break
			}
		}
	}
	var tot float64
	for _, i := range idx[:n] {
		tot += p[i]
	}
	set := make(map[int]float64, n)
	for _, i := range idx[:n] {
		set[i] = p[i] / tot
	}
	return set
}

// Gate returns an event that completes only once k n-by-n matrix products
// have run on a stream of their own (tens of milliseconds or more on the
// CPU device at n = 256, k = 8): a stream that waits on it is held back that
// long, so a test can tell whether work was ordered after it.
func Gate(t testing.TB, dev accel.Device, n, k int) accel.Event {
	t.Helper()
	g, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	l := accel.On(g)
	x, w, y := l.Alloc(accel.F32, n, n), l.Alloc(accel.F32, n, n), l.Alloc(accel.F32, n, n)
	l.FillF32(x, 1)
	l.FillF32(w, 0.5)
	for range k {
		l.MatMul(y, x, w)
	}
	l.Free(x, w, y)
	ev, err := dev.NewEvent()
	if err == nil {
		err = l.Err()
	}
	if err == nil {
		err = g.Record(ev)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ev
}
