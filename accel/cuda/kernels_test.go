package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// cudaSignatures parses every extern "C" __global__ kernel of kernels.cu into
// its parameter kinds.
func cudaSignatures(t *testing.T) map[string][]argKind {
	t.Helper()
	re := regexp.MustCompile(`(?s)extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(([^)]*)\)`)
	out := map[string][]argKind{}
	for _, m := range re.FindAllStringSubmatch(kernelSource, -1) {
		var kinds []argKind
		for _, p := range strings.Split(m[2], ",") {
			p = strings.Join(strings.Fields(p), " ")
			typ := p[:strings.LastIndex(p, " ")]
			switch {
			case strings.Contains(typ, "*"):
				kinds = append(kinds, aPtr)
			case typ == "int" || typ == "unsigned int":
				kinds = append(kinds, aI32)
			case typ == "float":
				kinds = append(kinds, aF32)
			case typ == "i64" || typ == "long long" || typ == "u64":
				kinds = append(kinds, aI64)
			case typ == "RopeFreqs":
				kinds = append(kinds, aRope)
			default:
				t.Fatalf("kernel %s: parameter %q of a type the Go side does not pack", m[1], p)
			}
		}
		out[m[1]] = kinds
	}
	return out
}

// The Go table of kernels and their parameters is kernels.cu's, exactly.
func TestKernelSignatures(t *testing.T) {
	sigs := cudaSignatures(t)
	if len(sigs) != numKernels {
		t.Errorf("kernels.cu has %d kernels, the Go table %d", len(sigs), numKernels)
	}
	for k, sp := range kernelSpecs {
		got, ok := sigs[sp.name]
		if !ok {
			t.Errorf("kernel %d (%s) is not in kernels.cu", k, sp.name)
			continue
		}
		if len(got) != len(sp.params) {
			t.Errorf("%s: kernels.cu has %d parameters %v, the Go table %d %v", sp.name, len(got), got, len(sp.params), sp.params)
			continue
		}
		for i := range got {
			if got[i] != sp.params[i] {
				t.Errorf("%s parameter %d: kernels.cu %v, Go table %v", sp.name, i, got[i], sp.params[i])
			}
		}
	}
	// The constants the host and kernels.cu share.
	for name, want := range map[string]int{"MM_WARPS": mmWarps, "AT_WARPS": attnThreads / 32, "AT_MAXD": attnMaxHead,
		"ROPE_TABLE": ropeTable, "SAMPLE_THREADS": blockThreads} {
		re := regexp.MustCompile(`#define\s+` + name + `\s+(\d+)`)
		m := re.FindStringSubmatch(kernelSource)
		if m == nil || m[1] != itoa(want) {
			t.Errorf("kernels.cu #define %s is %v, the host uses %d", name, m, want)
		}
	}
	for _, bound := range regexp.MustCompile(`__launch_bounds__\((\w+)\)\s+(\w+)`).FindAllStringSubmatch(kernelSource, -1) {
		n, name := bound[1], bound[2]
		want := blockThreads
		if name == "k_attention" {
			want = attnThreads
		}
		if n != itoa(want) && !(n == "SAMPLE_THREADS" && want == blockThreads) {
			t.Errorf("%s: __launch_bounds__(%s), launched with %d threads", name, n, want)
		}
	}
}

func itoa(v int) string { return strconv.Itoa(v) }

// fakeMem is device memory at a made-up address, for prepare.
type fakeMem struct {
	base uint64
	size int64
}

func (m *fakeMem) Size() int64 { return m.size }

func fakeResolver(b accel.Buffer, elem int64) (uint64, error) {
	m, ok := b.Memory().(*fakeMem)
	if !ok {
		return 0, accel.ErrInvalidArgument
	}
	if elem > 1 && b.Offset()%elem != 0 {
		return 0, accel.ErrInvalidArgument
	}
	return m.base + uint64(b.Offset()), nil
}

type fakeAlloc struct{ next uint64 }

func (a *fakeAlloc) tensor(dt accel.DType, rows, cols int) accel.Tensor {
	n := int64(rows) * int64(cols) * dt.Size()
	m := &fakeMem{base: a.next, size: max(n, 1)}
	a.next += uint64(n+4095) &^ 4095
	a.next += 4096
	return accel.Tensor{Buf: accel.NewBuffer(m, 0, n), DType: dt, Rows: rows, Cols: cols}
}

// calls is one valid call of every op, on fake memory.
func calls() []accel.Call {
	a := &fakeAlloc{next: 1 << 32}
	f, i := accel.F32, accel.I32
	const T, D, V, H, KVH, HD, PAGE, R, P = 5, 64, 100, 4, 2, 16, 4, 3, 4
	S := 8 * PAGE
	mk := func(op accel.Op, ts ...accel.Tensor) accel.Call {
		c := accel.Call{Op: op}
		copy(c.T[:], ts)
		return c
	}
	var cs []accel.Call
	c := mk(accel.OpFill, a.tensor(f, T, D))
	c.F[0] = 2.5
	cs = append(cs, c)
	c = mk(accel.OpFill, a.tensor(i, T, D))
	c.I[0] = -7
	cs = append(cs, c)
	cs = append(cs, mk(accel.OpEmbed, a.tensor(f, T, D), a.tensor(f, V, D), a.tensor(i, 1, T)))
	cs = append(cs, mk(accel.OpEmbed, a.tensor(f, T, D), a.tensor(accel.BF16, V, D), a.tensor(i, 1, T)))
	c = mk(accel.OpRMSNorm, a.tensor(f, T, D), a.tensor(f, T, D), a.tensor(f, 1, D))
	c.F[0] = 1e-5
	cs = append(cs, c)
	cs = append(cs, mk(accel.OpMatMul, a.tensor(f, T, 3*D), a.tensor(f, T, D), a.tensor(f, 3*D, D)))
	cs = append(cs, mk(accel.OpMatMul, a.tensor(f, T, 3*D), a.tensor(f, T, D), a.tensor(accel.BF16, 3*D, D)))
	cs = append(cs, mk(accel.OpMatMul, a.tensor(f, T, 512), a.tensor(f, T, 256), a.tensor(f, 512, 256)))
	c = mk(accel.OpRoPE, a.tensor(f, T, H*HD), a.tensor(f, T, KVH*HD), a.tensor(i, 1, T))
	c.I[0], c.F[0] = HD, 10000
	cs = append(cs, c)
	for _, layout := range []accel.RoPELayout{accel.RoPEInterleaved, accel.RoPEHalves} {
		c = mk(accel.OpRoPETable, a.tensor(f, T, H*HD), a.tensor(f, T, KVH*HD), a.tensor(i, 1, T), a.tensor(f, 1, HD/2))
		c.I[0], c.I[1] = HD, int(layout)
		cs = append(cs, c)
	}
	cs = append(cs, mk(accel.OpAddRow, a.tensor(f, T, D), a.tensor(f, T, D), a.tensor(f, 1, D)))
	cs = append(cs, mk(accel.OpKVWrite, a.tensor(f, S, KVH*HD), a.tensor(f, S, KVH*HD), a.tensor(f, T, KVH*HD), a.tensor(f, T, KVH*HD), a.tensor(i, 1, T)))
	c = mk(accel.OpAttention, a.tensor(f, T, H*HD), a.tensor(f, T, H*HD), a.tensor(f, S, KVH*HD), a.tensor(f, S, KVH*HD),
		a.tensor(i, 1, T), a.tensor(i, 1, T), a.tensor(i, R, P))
	c.I[0], c.I[1], c.I[2], c.I[3] = H, KVH, HD, PAGE
	cs = append(cs, c)
	cs = append(cs, mk(accel.OpSiLUMul, a.tensor(f, T, D), a.tensor(f, T, D), a.tensor(f, T, D)))
	cs = append(cs, mk(accel.OpAdd, a.tensor(f, T, D), a.tensor(f, T, D), a.tensor(f, T, D)))
	cs = append(cs, mk(accel.OpGatherRows, a.tensor(f, R, D), a.tensor(f, T, D), a.tensor(i, 1, R)))
	cs = append(cs, mk(accel.OpArgmax, a.tensor(i, 1, R), a.tensor(f, R, V)))
	cs = append(cs, mk(accel.OpSample, a.tensor(i, 1, R), a.tensor(f, R, V), a.tensor(f, 1, R), a.tensor(i, 1, R),
		a.tensor(f, 1, R), a.tensor(i, R, 2), a.tensor(i, 1, R)))
	c = mk(accel.OpLogProbs, a.tensor(f, R, 21), a.tensor(i, R, 20), a.tensor(f, R, V), a.tensor(i, 1, R))
	c.I[0] = 20
	cs = append(cs, c)
	cs = append(cs, mk(accel.OpPenalize, a.tensor(f, R, V), a.tensor(f, R, V), a.tensor(i, R, V), a.tensor(f, R, V),
		a.tensor(i, R, 2), a.tensor(f, R, 4), a.tensor(f, 1, R)))
	cs = append(cs, mk(accel.OpCountTokens, a.tensor(i, R, V), a.tensor(i, R, 2), a.tensor(i, 1, R)))
	return cs
}

// Every op's call packs exactly the arguments its kernel declares, pointers
// in operand order, with a launch geometry that covers its work.
func TestPrepareLayouts(t *testing.T) {
	seen := map[accel.Op]bool{}
	for _, c := range calls() {
		if err := c.Validate(); err != nil {
			t.Fatalf("%v: the test's call is invalid: %v", c.Op, err)
		}
		for _, blas := range []bool{false, true} {
			kl, err := prepare(&c, fakeResolver, blas)
			if err != nil {
				t.Fatalf("%v: %v", c.Op, err)
			}
			seen[c.Op] = true
			if kl.gemm != nil {
				if !blas || c.T[2].DType != accel.F32 {
					t.Errorf("%v: cuBLAS chosen without a handle or for %v weights", c.Op, c.T[2].DType)
				}
				g := kl.gemm
				if g.c != addr(c.T[0]) || g.b != addr(c.T[1]) || g.a != addr(c.T[2]) {
					t.Errorf("matmul: cuBLAS pointers A=%#x B=%#x C=%#x", g.a, g.b, g.c)
				}
				continue
			}
			sp := kernelSpecs[kl.k]
			if err := kl.matches(sp); err != nil {
				t.Fatal(err)
			}
			// Pointers in operand order.
			p := 0
			for i := 0; i < kl.nargs; i++ {
				if kl.args[i].kind != aPtr {
					continue
				}
				if want := addr(c.T[p]); kl.args[i].v != want {
					t.Errorf("%v (%s): pointer argument %d is %#x, operand %d is at %#x", c.Op, sp.name, i, kl.args[i].v, p, want)
				}
				p++
			}
			if p != c.Operands() {
				t.Errorf("%v (%s): %d pointers for %d operands", c.Op, sp.name, p, c.Operands())
			}
			if kl.grid == 0 || kl.block == 0 || kl.block%32 != 0 || kl.block > 1024 {
				t.Errorf("%v (%s): grid %d, block %d", c.Op, sp.name, kl.grid, kl.block)
			}
			checkGeometry(t, &c, kl)
		}
	}
	for op := accel.OpFill; int(op) < accel.NumOps; op++ {
		if !seen[op] {
			t.Errorf("no test call of %v", op)
		}
	}
}

func addr(t accel.Tensor) uint64 {
	v, err := fakeResolver(t.Buf, t.DType.Size())
	if err != nil {
		panic(err)
	}
	return v
}

// checkGeometry checks what each kernel assumes of its launch.
func checkGeometry(t *testing.T, c *accel.Call, kl *klaunch) {
	t.Helper()
	arg := func(i int) int64 { return int64(int32(uint32(kl.args[i].v))) }
	switch kl.k {
	case kRMSNorm, kArgmax, kSample:
		// One block per row.
		if int64(kl.grid) != int64(c.T[1].Rows) {
			t.Errorf("%s: %d blocks for %d rows", kl.name(), kl.grid, c.T[1].Rows)
		}
	case kKVWrite:
		if int(kl.grid) != c.T[2].Rows {
			t.Errorf("kv_write: %d blocks for %d tokens", kl.grid, c.T[2].Rows)
		}
	case kAttention:
		if int(kl.grid) != c.T[1].Rows*c.I[0] || kl.block != attnThreads {
			t.Errorf("attention: %d blocks of %d for %d tokens × %d heads", kl.grid, kl.block, c.T[1].Rows, c.I[0])
		}
		// t, nh, nkv, hd, page, nrows, ppr, nslots
		want := []int64{int64(c.T[1].Rows), int64(c.I[0]), int64(c.I[1]), int64(c.I[2]), int64(c.I[3]), int64(c.T[6].Rows), int64(c.T[6].Cols), int64(c.T[2].Rows)}
		for i, w := range want {
			if arg(7+i) != w {
				t.Errorf("attention int argument %d is %d, want %d", i, arg(7+i), w)
			}
		}
	case kMatMulF32, kMatMulBF16:
		if int(kl.grid)*mmWarps < c.T[0].Cols || (int(kl.grid)-1)*mmWarps >= c.T[0].Cols {
			t.Errorf("matmul: %d blocks of %d outputs for %d outputs", kl.grid, mmWarps, c.T[0].Cols)
		}
		if arg(3) != int64(c.T[1].Rows) || arg(4) != int64(c.T[1].Cols) || arg(5) != int64(c.T[0].Cols) {
			t.Errorf("matmul: t, nin, nout = %d, %d, %d", arg(3), arg(4), arg(5))
		}
	case kRoPE:
		hd := c.I[0]
		for i := 0; i < hd; i += 2 {
			if kl.rope[i/2] != accel.RoPEFreq(i, hd, c.F[0]) {
				t.Errorf("rope frequency %d: %v", i, kl.rope[i/2])
			}
		}
		if arg(8) != 1 || math.Float32frombits(uint32(kl.args[9].v)) != c.F[0] {
			t.Errorf("rope: use_table %d, theta %v", arg(8), math.Float32frombits(uint32(kl.args[9].v)))
		}
	case kRoPETable:
		// t, hd, qc, kc, halves
		want := []int64{int64(c.T[0].Rows), int64(c.I[0]), int64(c.T[0].Cols), int64(c.T[1].Cols), int64(c.I[1])}
		for i, w := range want {
			if arg(4+i) != w {
				t.Errorf("rope_table int argument %d is %d, want %d", i, arg(4+i), w)
			}
		}
		if int64(kl.grid)*blockThreads < min(int64(c.T[0].Rows)*int64(c.I[0]/2), maxGridStride*blockThreads) {
			t.Errorf("rope_table: %d blocks for %d pairs", kl.grid, c.T[0].Rows*c.I[0]/2)
		}
	case kAddRow:
		if int64(kl.args[3].v) != int64(c.T[0].Len()) || int64(kl.args[4].v) != int64(c.T[0].Cols) {
			t.Errorf("add_row: total %d, n %d", kl.args[3].v, kl.args[4].v)
		}
	case kFill:
		if int64(kl.args[1].v) != int64(c.T[0].Len()) {
			t.Errorf("fill: n = %d", kl.args[1].v)
		}
		want := uint32(int32(c.I[0]))
		if c.T[0].DType == accel.F32 {
			want = math.Float32bits(c.F[0])
		}
		if uint32(kl.args[2].v) != want {
			t.Errorf("fill: value bits %#x, want %#x", kl.args[2].v, want)
		}
	}
}

// A misaligned operand, a foreign buffer or an oversized head is refused
// before anything reaches the driver.
func TestPrepareRefuses(t *testing.T) {
	a := &fakeAlloc{next: 1 << 32}
	x := a.tensor(accel.F32, 1, 9)
	bad := accel.Tensor{Buf: x.Buf.Slice(2, 32), DType: accel.F32, Rows: 1, Cols: 8}
	y := a.tensor(accel.F32, 1, 8)
	c := accel.Call{Op: accel.OpAdd}
	c.T[0], c.T[1], c.T[2] = y, bad, y
	if _, err := prepare(&c, fakeResolver, false); !errors.Is(err, accel.ErrInvalidArgument) {
		t.Errorf("misaligned operand: %v", err)
	}
	c = accel.Call{Op: accel.OpAttention}
	const hd = 512
	c.T[0], c.T[1] = a.tensor(accel.F32, 1, hd), a.tensor(accel.F32, 1, hd)
	c.T[2], c.T[3] = a.tensor(accel.F32, 4, hd), a.tensor(accel.F32, 4, hd)
	c.T[4], c.T[5], c.T[6] = a.tensor(accel.I32, 1, 1), a.tensor(accel.I32, 1, 1), a.tensor(accel.I32, 1, 1)
	c.I = [4]int{1, 1, hd, 4}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := prepare(&c, fakeResolver, false); !errors.Is(err, accel.ErrUnsupported) {
		t.Errorf("head size %d: %v", hd, err)
	}
	// Empty operands launch nothing.
	c = accel.Call{Op: accel.OpAdd}
	e := a.tensor(accel.F32, 0, 8)
	c.T[0], c.T[1], c.T[2] = e, e, e
	kl, err := prepare(&c, fakeResolver, false)
	if err != nil || !kl.noWork {
		t.Errorf("empty add: %v, noWork %v", err, kl != nil && kl.noWork)
	}
}

// sgemmColMajor is the reference column-major BLAS sgemm:
// C = alpha·op(A)·op(B) + beta·C, op(A) m×k, op(B) k×n, C m×n.
func sgemmColMajor(transa, transb, m, n, k int, alpha float64, a []float32, lda int, b []float32, ldb int, beta float64, c []float32, ldc int) {
	at := func(i, l int) float64 { // op(A)[i,l]
		if transa == cublasOpT {
			return float64(a[l+i*lda])
		}
		return float64(a[i+l*lda])
	}
	bt := func(l, j int) float64 { // op(B)[l,j]
		if transb == cublasOpT {
			return float64(b[j+l*ldb])
		}
		return float64(b[l+j*ldb])
	}
	for j := 0; j < n; j++ {
		for i := 0; i < m; i++ {
			var s float64
			for l := 0; l < k; l++ {
				s += at(i, l) * bt(l, j)
			}
			c[i+j*ldc] = float32(alpha*s + beta*float64(c[i+j*ldc]))
		}
	}
}

// gemmFor's column-major call computes the row-major y = x·Wᵀ.
func TestGemmMapping(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, sh := range [][3]int{{1, 64, 64}, {3, 17, 33}, {8, 172, 64}, {64, 64, 172}, {5, 256, 512}, {2, 1, 7}} {
		rows, in, out := sh[0], sh[1], sh[2]
		x := make([]float32, rows*in)
		w := make([]float32, out*in)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		g := gemmFor(rows, in, out)
		y := make([]float32, rows*out)
		// A is W, B is x, C is y: the pointers the call passes.
		sgemmColMajor(g.transa, g.transb, g.m, g.n, g.k, 1, w, g.lda, x, g.ldb, 0, y, g.ldc)
		if g.lda < max(1, g.k) || g.ldb < max(1, g.k) || g.ldc < max(1, g.m) {
			t.Errorf("%v: leading dimensions lda %d ldb %d ldc %d for m %d n %d k %d", sh, g.lda, g.ldb, g.ldc, g.m, g.n, g.k)
		}
		for tt := 0; tt < rows; tt++ {
			for o := 0; o < out; o++ {
				var s float64
				for i := 0; i < in; i++ {
					s += float64(x[tt*in+i]) * float64(w[o*in+i])
				}
				if got := y[tt*out+o]; math.Abs(float64(got)-s) > 1e-4*math.Max(1, math.Abs(s)) {
					t.Fatalf("%v: y[%d,%d] = %v, want %v", sh, tt, o, got, s)
				}
			}
		}
	}
}

// The cuBLAS rule: float32 weights of at least blasMinWeights elements, and
// only where the stream has a handle.
func TestBLASChoice(t *testing.T) {
	a := &fakeAlloc{next: 1 << 32}
	for _, c := range []struct {
		dt       accel.DType
		in, out  int
		blas     bool
		wantBLAS bool
	}{
		{accel.F32, 256, 256, true, true},
		{accel.F32, 256, 255, true, false},
		{accel.F32, 256, 256, false, false},
		{accel.BF16, 2048, 2048, true, false},
	} {
		call := accel.Call{Op: accel.OpMatMul}
		call.T[0], call.T[1], call.T[2] = a.tensor(accel.F32, 2, c.out), a.tensor(accel.F32, 2, c.in), a.tensor(c.dt, c.out, c.in)
		kl, err := prepare(&call, fakeResolver, c.blas)
		if err != nil {
			t.Fatal(err)
		}
		if (kl.gemm != nil) != c.wantBLAS {
			t.Errorf("%v %dx%d, handle %v: cuBLAS %v", c.dt, c.out, c.in, c.blas, kl.gemm != nil)
		}
	}
}
