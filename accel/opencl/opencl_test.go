package opencl_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/accel/opencl"
)

func TestConformance(t *testing.T) { acceltest.Run(t, "opencl") }

// open opens OpenCL device 0 with a stream. It skips where OpenCL is not
// usable here (no library, no platform), but fails where a device is listed
// and does not open: acceltest would skip that silently.
func open(t testing.TB) *acceltest.Env {
	t.Helper()
	b, err := accel.Lookup("opencl")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Probe(); err != nil {
		t.Skipf("OpenCL not usable here: %v", err)
	}
	if _, err := b.Devices(); err != nil {
		t.Skipf("OpenCL not usable here: %v", err)
	}
	if _, err := accel.Open("opencl", 0, accel.Options{}); err != nil {
		t.Fatalf("OpenCL lists a device that does not open: %v", err)
	}
	return acceltest.Open(t, "opencl", accel.Options{})
}

func TestProbeWithoutLibrary(t *testing.T) {
	missing := "/nonexistent/reprise/libOpenCL-missing.so.1"
	t.Setenv(opencl.EnvLibrary, missing)
	err := accel.Probe("opencl")
	if !errors.Is(err, accel.ErrBackendUnavailable) {
		t.Fatalf("Probe with %s=%s: %v, want ErrBackendUnavailable", opencl.EnvLibrary, missing, err)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Fatalf("Probe's error does not name the path searched: %v", err)
	}
	if _, err := accel.Open("opencl", 0, accel.Options{}); !errors.Is(err, accel.ErrBackendUnavailable) {
		t.Fatalf("Open without the library: %v, want ErrBackendUnavailable", err)
	}
}

func TestProbeDefaultPathsNamed(t *testing.T) {
	if os.Getenv(opencl.EnvLibrary) != "" {
		t.Skip("library overridden")
	}
	if err := accel.Probe("opencl"); err != nil {
		for _, p := range []string{"libOpenCL.so.1", "libOpenCL.so"} {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("Probe's error does not name %s: %v", p, err)
			}
		}
	}
}

func TestDevices(t *testing.T) {
	open(t)
	b, _ := accel.Lookup("opencl")
	ds, err := b.Devices()
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range ds {
		if d.Backend != "opencl" || d.Ordinal != i || d.Name == "" {
			t.Errorf("device %d: %+v", i, d)
		}
		t.Logf("%v: %s", d, d.Detail)
	}
	if _, err := b.Open(len(ds), accel.Options{}); err == nil {
		t.Errorf("Open(%d) of %d devices succeeded", len(ds), len(ds))
	}
}

func bf16Bits(v []float32) ([]byte, []float32) {
	bits := make([]byte, 2*len(v))
	w := make([]float32, len(v))
	for i, x := range v {
		u := uint16(math.Float32bits(x) >> 16)
		w[i] = math.Float32frombits(uint32(u) << 16)
		bits[2*i], bits[2*i+1] = byte(u), byte(u>>8)
	}
	return bits, w
}

func uploadBF16(e *acceltest.Env, v []float32, rows, cols int) accel.Tensor {
	e.T.Helper()
	bits, _ := bf16Bits(v)
	buf, err := e.Dev.Alloc(int64(len(bits)))
	if err != nil {
		e.T.Fatal(err)
	}
	if err := accel.Upload(e.S, buf, bits); err != nil {
		e.T.Fatal(err)
	}
	return accel.Tensor{Buf: buf, DType: accel.BF16, Rows: rows, Cols: cols}
}

func sameBits(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("length %d, want %d", len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			return fmt.Errorf("element %d: got %v, want %v bit for bit", i, got[i], want[i])
		}
	}
	return nil
}

// BF16 weights: the table rows and the matrix product widen bf16 exactly, so
// they equal the float32 paths on the widened values bit for bit.
func TestBF16(t *testing.T) {
	e := open(t)
	r := rand.New(rand.NewPCG(11, 12))
	const v, d, rows = 9, 24, 5
	tab := acceltest.Rand(r, v*d, 1)
	_, tabW := bf16Bits(tab)
	tb := uploadBF16(e, tab, v, d)
	tf := e.F32(tabW, v, d)
	ids := e.I32([]int32{3, 8, -1, 9, 0}, 1, rows)
	ob, of := e.Zeros(accel.F32, rows, d), e.Zeros(accel.F32, rows, d)
	l := accel.On(e.S)
	l.Embed(ob, tb, ids)
	l.Embed(of, tf, ids)
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
	gb, gf := e.ReadF32(ob), e.ReadF32(of)
	if err := sameBits(gb, gf); err != nil {
		t.Errorf("embed bf16 against f32: %v", err)
	}
	if !allZero(gb[2*d:3*d]) || !allZero(gb[3*d:4*d]) {
		t.Errorf("embed of ids -1 and 9 (vocab 9) gave %v, %v", gb[2*d:3*d], gb[3*d:4*d])
	}
	if err := sameBits(gb[:d], tabW[3*d:4*d]); err != nil {
		t.Errorf("embed row 3: %v", err)
	}
	// Odd sizes, and a bf16 matrix that starts 2 bytes into its buffer.
	const in, out = 37, 13
	wv := acceltest.Rand(r, out*in, 0.2)
	bits, wW := bf16Bits(wv)
	buf, err := e.Dev.Alloc(int64(len(bits)) + 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := accel.Upload(e.S, buf.Slice(2, int64(len(bits))), bits); err != nil {
		t.Fatal(err)
	}
	wb := accel.Tensor{Buf: buf.Slice(2, int64(len(bits))), DType: accel.BF16, Rows: out, Cols: in}
	wf := e.F32(wW, out, in)
	x := e.F32(acceltest.Rand(r, rows*in, 1), rows, in)
	yb, yf := e.Zeros(accel.F32, rows, out), e.Zeros(accel.F32, rows, out)
	l.MatMul(yb, x, wb)
	l.MatMul(yf, x, wf)
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
	if err := sameBits(e.ReadF32(yb), e.ReadF32(yf)); err != nil {
		t.Errorf("matmul bf16 against f32: %v", err)
	}
}

func allZero(v []float32) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}

// A tensor that does not start on an element boundary cannot be addressed
// by the kernels: an invalid argument, and nothing is launched.
func TestMisalignedOperand(t *testing.T) {
	e := open(t)
	buf, err := e.Dev.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	x := accel.Tensor{Buf: buf.Slice(2, 32), DType: accel.F32, Rows: 1, Cols: 8}
	y := e.Zeros(accel.F32, 1, 8)
	l := accel.On(e.S)
	l.Add(y, x, y)
	if !errors.Is(l.Err(), accel.ErrInvalidArgument) {
		t.Fatalf("add over a misaligned operand: %v, want ErrInvalidArgument", l.Err())
	}
}

// Buffers of another backend are refused.
func TestForeignBuffer(t *testing.T) {
	e := open(t)
	c := acceltest.Open(t, "cpu", accel.Options{})
	x := c.F32([]float32{1, 2}, 1, 2)
	y := e.Zeros(accel.F32, 1, 2)
	l := accel.On(e.S)
	l.Add(y, x, y)
	if !errors.Is(l.Err(), accel.ErrInvalidArgument) {
		t.Fatalf("launch with a CPU buffer: %v, want ErrInvalidArgument", l.Err())
	}
	if err := e.S.Copy(y.Buf.Slice(0, 8), x.Buf.Slice(0, 8)); !errors.Is(err, accel.ErrInvalidArgument) {
		t.Fatalf("copy from a CPU buffer: %v, want ErrInvalidArgument", err)
	}
}
