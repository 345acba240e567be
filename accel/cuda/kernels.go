package cuda

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"math"
	"strings"

	"github.com/reprise-ml/reprise/accel"
)

// kernelSource is the CUDA C++ of every kernel, compiled by NVRTC at Open.
//
//go:embed kernels.cu
var kernelSource string

// fallbackPTX is kernels.cu compiled ahead of time for compute_80 (PTX the
// driver compiles for any device of compute capability 8.0 or later), used
// only when NVRTC is missing or fails, and only while its first line records
// the sha256 of the current kernels.cu: a stale fallback is never loaded.
// TestFallbackPTX says how to regenerate it.
//
//go:embed kernels_fallback.ptx
var fallbackPTX string

// fallbackArch is the architecture of fallbackPTX.
const fallbackArch = 80

// fallbackHeader is the first line of kernels_fallback.ptx.
func fallbackHeader(sum, nvrtc string) string {
	return fmt.Sprintf("// reprise kernels.cu sha256 %s compute_%d %s", sum, fallbackArch, nvrtc)
}

// fallbackRegenerate is the second line of kernels_fallback.ptx: the command
// that regenerates it.
const fallbackRegenerate = "// regenerate: go test ./accel/cuda -run TestFallbackPTX -args -update-fallback-ptx (needs NVRTC, the oldest at hand: its PTX loads on every newer driver)"

func sourceSum() string {
	h := sha256.Sum256([]byte(kernelSource))
	return hex.EncodeToString(h[:])
}

// fallbackImage is the embedded PTX as a loadable image, if it is current.
func fallbackImage() ([]byte, string, bool) {
	first, _, _ := strings.Cut(fallbackPTX, "\n")
	want := fallbackHeader(sourceSum(), "")
	if !strings.HasPrefix(first, strings.TrimSpace(want)) {
		return nil, "the embedded fallback PTX is stale (kernels.cu changed since it was generated)", false
	}
	return append([]byte(fallbackPTX), 0), strings.TrimSpace(strings.TrimPrefix(first, strings.TrimSpace(want))), true
}

// This file is free of driver calls (and of build constraints) so that the
// mapping from accel.Call to kernel launches is tested everywhere.

// The kernels of kernels.cu.
const (
	kFill = iota
	kEmbedF32
	kEmbedBF16
	kRMSNorm
	kMatMulF32
	kMatMulBF16
	kMatMulQ8_0
	kMatMulQ4_0
	kMatMulQ4_K
	kMatMulQ6_K
	kRoPE
	kKVWrite
	kAttention
	kSiLUMul
	kAdd
	kArgmax
	kSample
	kLogProbs
	kPenalize
	kCountTokens
	kTestUniform
	kRoPETable
	kAddRow
	numKernels
)

// argKind is the C type of a kernel parameter, as the driver reads it.
type argKind uint8

const (
	aPtr  argKind = iota + 1 // a device pointer (8 bytes)
	aI32                     // int or unsigned int (4 bytes)
	aF32                     // float (4 bytes)
	aI64                     // long long (8 bytes)
	aRope                    // struct RopeFreqs, by value (ropeTable floats)
)

func (k argKind) String() string {
	switch k {
	case aPtr:
		return "ptr"
	case aI32:
		return "i32"
	case aF32:
		return "f32"
	case aI64:
		return "i64"
	case aRope:
		return "RopeFreqs"
	}
	return fmt.Sprintf("argKind(%d)", k)
}

// kernelSpec is a kernel's name and parameter list. internal_test.go checks
// the table against the signatures parsed from kernels.cu.
type kernelSpec struct {
	name   string
	params []argKind
}

var kernelSpecs = [numKernels]kernelSpec{
	kFill:        {"k_fill", []argKind{aPtr, aI64, aI32}},
	kEmbedF32:    {"k_embed_f32", []argKind{aPtr, aPtr, aPtr, aI32, aI32, aI32}},
	kEmbedBF16:   {"k_embed_bf16", []argKind{aPtr, aPtr, aPtr, aI32, aI32, aI32}},
	kRMSNorm:     {"k_rmsnorm", []argKind{aPtr, aPtr, aPtr, aI32, aI32, aF32}},
	kMatMulF32:   {"k_matmul_f32", []argKind{aPtr, aPtr, aPtr, aI32, aI32, aI32}},
	kMatMulBF16:  {"k_matmul_bf16", []argKind{aPtr, aPtr, aPtr, aI32, aI32, aI32}},
	kMatMulQ8_0:  {"k_matmul_q8_0", []argKind{aPtr, aPtr, aPtr, aI32, aI32, aI32}},
	kMatMulQ4_0:  {"k_matmul_q4_0", []argKind{aPtr, aPtr, aPtr, aI32, aI32, aI32}},
	kMatMulQ4_K:  {"k_matmul_q4_k", []argKind{aPtr, aPtr, aPtr, aI32, aI32, aI32}},
	kMatMulQ6_K:  {"k_matmul_q6_k", []argKind{aPtr, aPtr, aPtr, aI32, aI32, aI32}},
	kRoPE:        {"k_rope", []argKind{aPtr, aPtr, aPtr, aRope, aI32, aI32, aI32, aI32, aI32, aF32}},
	kKVWrite:     {"k_kv_write", []argKind{aPtr, aPtr, aPtr, aPtr, aPtr, aI32, aI32, aI32, aI32}},
	kAttention:   {"k_attention", []argKind{aPtr, aPtr, aPtr, aPtr, aPtr, aPtr, aPtr, aI32, aI32, aI32, aI32, aI32, aI32, aI32, aI32}},
	kSiLUMul:     {"k_silu_mul", []argKind{aPtr, aPtr, aPtr, aI64}},
	kAdd:         {"k_add", []argKind{aPtr, aPtr, aPtr, aI64}},
	kArgmax:      {"k_argmax", []argKind{aPtr, aPtr, aI32, aI32}},
	kSample:      {"k_sample", []argKind{aPtr, aPtr, aPtr, aPtr, aPtr, aPtr, aPtr, aI32, aI32}},
	kLogProbs:    {"k_logprobs", []argKind{aPtr, aPtr, aPtr, aPtr, aI32, aI32, aI32}},
	kPenalize:    {"k_penalize", []argKind{aPtr, aPtr, aPtr, aPtr, aPtr, aPtr, aPtr, aI32, aI32, aI32}},
	kCountTokens: {"k_count_tokens", []argKind{aPtr, aPtr, aPtr, aI32, aI32, aI32}},
	kTestUniform: {"k_test_uniform", []argKind{aPtr, aPtr, aPtr, aI32}},
	kRoPETable:   {"k_rope_table", []argKind{aPtr, aPtr, aPtr, aPtr, aI32, aI32, aI32, aI32, aI32}},
	kAddRow:      {"k_add_row", []argKind{aPtr, aPtr, aPtr, aI64, aI64}},
}

// Launch geometry, as kernels.cu expects it.
const (
	blockThreads   = 256 // every kernel but attention
	attnThreads    = 128 // AT_WARPS warps
	attnMaxHead    = 256 // AT_MAXD
	ropeTable      = 128 // ROPE_TABLE: RoPE frequencies passed by value
	mmWarps        = 8   // MM_WARPS: outputs per matmul block
	maxGridStride  = 1 << 16
	maxKernelArgs  = 16
	maxGridBlocksX = math.MaxInt32
)

// cublasOperation_t (cublas_api.h).
const (
	cublasOpN = 0
	cublasOpT = 1
)

// blasMinWeights is the smallest weight matrix (O·I elements) a float32
// MatMul hands to cuBLAS; smaller ones (and every bf16 one) run
// k_matmul_*, whose per-row order does not depend on the batch.
const blasMinWeights = 1 << 16

// karg is one kernel argument.
type karg struct {
	kind argKind
	v    uint64 // the value's bits, little-endian (unused for aRope)
}

// gemm is a float32 MatMul for cuBLAS: cublasSgemm_v2's arguments in column
// major (see gemmFor).
type gemm struct {
	transa, transb int
	m, n, k        int
	a, b, c        uint64 // device pointers
	lda, ldb, ldc  int
}

// klaunch is one call resolved to a kernel launch (or a cuBLAS call).
type klaunch struct {
	k      int
	grid   uint32 // blocks (1-D)
	block  uint32 // threads per block
	nargs  int
	args   [maxKernelArgs]karg
	rope   *[ropeTable]float32 // aRope's value (RoPE only)
	gemm   *gemm               // set: run cublasSgemm instead of a kernel
	noWork bool                // nothing to launch (an empty operand)
}

func (kl *klaunch) add(k argKind, v uint64) {
	kl.args[kl.nargs] = karg{kind: k, v: v}
	kl.nargs++
}

func (kl *klaunch) ptr(p uint64)   { kl.add(aPtr, p) }
func (kl *klaunch) i64(v int64)    { kl.add(aI64, uint64(v)) }
func (kl *klaunch) u32(v uint32)   { kl.add(aI32, uint64(v)) }
func (kl *klaunch) f32(v float32)  { kl.add(aF32, uint64(math.Float32bits(v))) }
func (kl *klaunch) ropeArg()       { kl.add(aRope, 0) }
func (kl *klaunch) check() error   { return kl.matches(kernelSpecs[kl.k]) }
func (kl *klaunch) name() string   { return kernelSpecs[kl.k].name }
func (kl *klaunch) setGrid(g int)  { kl.grid = uint32(g) }
func (kl *klaunch) setBlock(b int) { kl.block = uint32(b) }

// matches reports a launch whose arguments do not follow the kernel's
// parameter list: a bug in prepare, caught before the driver reads garbage.
func (kl *klaunch) matches(sp kernelSpec) error {
	if kl.nargs != len(sp.params) {
		return fmt.Errorf("cuda: internal error: %s launched with %d arguments, its signature has %d", sp.name, kl.nargs, len(sp.params))
	}
	for i, p := range sp.params {
		if kl.args[i].kind != p {
			return fmt.Errorf("cuda: internal error: %s argument %d is %v, its signature says %v", sp.name, i, kl.args[i].kind, p)
		}
	}
	return nil
}

// i32 checks that a dimension fits a kernel's int.
func (kl *klaunch) i32(v int) error {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return fmt.Errorf("cuda: dimension %d does not fit a 32-bit kernel argument: %w", v, accel.ErrInvalidArgument)
	}
	kl.u32(uint32(int32(v)))
	return nil
}

// gridFor is the number of blocks a grid-stride kernel over n elements uses.
func gridFor(n int64) int {
	g := (n + blockThreads - 1) / blockThreads
	if g > maxGridStride {
		g = maxGridStride
	}
	if g < 1 {
		g = 1
	}
	return int(g)
}

// pointerOf resolves a buffer to its device address, checking that it is this
// device's memory and that it starts on an element boundary.
type resolver func(b accel.Buffer, elem int64) (uint64, error)

// prepare resolves a validated call into a launch. useBLAS says whether the
// stream has a cuBLAS handle for float32 matrix products.
func prepare(c *accel.Call, ptrOf resolver, useBLAS bool) (*klaunch, error) {
	kl := &klaunch{block: blockThreads}
	t := c.T
	var err error
	ptrs := func(ts ...accel.Tensor) {
		for _, x := range ts {
			if err != nil {
				return
			}
			var p uint64
			elem := x.DType.Size()
			if x.DType.BlockSize() > 1 {
				elem = 1 // quantized blocks: addressed in bytes
			}
			if p, err = ptrOf(x.Buf, elem); err == nil {
				kl.ptr(p)
			}
		}
	}
	ints := func(vs ...int) {
		for _, v := range vs {
			if err == nil {
				err = kl.i32(v)
			}
		}
	}
	blocks := func(n int) {
		if err == nil && (n < 0 || n > maxGridBlocksX) {
			err = fmt.Errorf("cuda: %d blocks exceed the grid's limit: %w", n, accel.ErrInvalidArgument)
		}
		kl.setGrid(n)
		kl.noWork = kl.noWork || n == 0
	}
	switch c.Op {
	case accel.OpFill:
		kl.k = kFill
		ptrs(t[0])
		n := int64(t[0].Len())
		kl.i64(n)
		if t[0].DType == accel.I32 {
			kl.u32(uint32(int32(c.I[0])))
		} else {
			kl.u32(math.Float32bits(c.F[0]))
		}
		kl.setGrid(gridFor(n))
		kl.noWork = n == 0
	case accel.OpEmbed, accel.OpGatherRows:
		kl.k = kEmbedF32
		if t[1].DType == accel.BF16 {
			kl.k = kEmbedBF16
		}
		ptrs(t[0], t[1], t[2])
		ints(t[0].Rows, t[0].Cols, t[1].Rows)
		n := int64(t[0].Rows) * int64(t[0].Cols)
		kl.setGrid(gridFor(n))
		kl.noWork = n == 0
	case accel.OpRMSNorm:
		kl.k = kRMSNorm
		ptrs(t[0], t[1], t[2])
		ints(t[1].Rows, t[1].Cols)
		kl.f32(c.F[0])
		blocks(t[1].Rows)
	case accel.OpMatMul:
		y, x, w := t[0], t[1], t[2]
		rows, in, out := x.Rows, x.Cols, y.Cols
		if useBLAS && w.DType == accel.F32 && int64(in)*int64(out) >= blasMinWeights && rows > 0 && in > 0 {
			g := gemmFor(rows, in, out)
			var py, px, pw uint64
			if py, err = ptrOf(y.Buf, 4); err == nil {
				if px, err = ptrOf(x.Buf, 4); err == nil {
					pw, err = ptrOf(w.Buf, 4)
				}
			}
			if err == nil {
				for _, v := range []int{rows, in, out} {
					if v > math.MaxInt32 {
						err = fmt.Errorf("cuda: matmul dimension %d exceeds cuBLAS's int: %w", v, accel.ErrInvalidArgument)
					}
				}
			}
			g.a, g.b, g.c = pw, px, py
			kl.gemm = &g
			kl.k = kMatMulF32 // for messages
			kl.noWork = out == 0
			break
		}
		switch w.DType {
		case accel.BF16:
			kl.k = kMatMulBF16
		case accel.Q8_0:
			kl.k = kMatMulQ8_0
		case accel.Q4_0:
			kl.k = kMatMulQ4_0
		case accel.Q4_K:
			kl.k = kMatMulQ4_K
		case accel.Q6_K:
			kl.k = kMatMulQ6_K
		default:
			kl.k = kMatMulF32
		}
		ptrs(y, x, w)
		ints(rows, in, out)
		blocks((out + mmWarps - 1) / mmWarps)
		kl.noWork = kl.noWork || rows == 0
	case accel.OpRoPE:
		kl.k = kRoPE
		hd, theta := c.I[0], c.F[0]
		ptrs(t[0], t[1], t[2])
		kl.ropeArg()
		kl.rope = new([ropeTable]float32)
		useTable := hd/2 <= ropeTable
		if useTable {
			for i := 0; i < hd; i += 2 {
				kl.rope[i/2] = accel.RoPEFreq(i, hd, theta)
			}
		}
		ints(t[0].Rows, hd, t[0].Cols, t[1].Cols)
		if useTable {
			kl.u32(1)
		} else {
			kl.u32(0)
		}
		kl.f32(theta)
		n := int64(t[0].Rows) * int64(hd/2)
		kl.setGrid(gridFor(n))
		kl.noWork = n == 0
	case accel.OpRoPETable:
		kl.k = kRoPETable
		hd := c.I[0]
		ptrs(t[0], t[1], t[2], t[3])
		ints(t[0].Rows, hd, t[0].Cols, t[1].Cols, c.I[1])
		n := int64(t[0].Rows) * int64(hd/2)
		kl.setGrid(gridFor(n))
		kl.noWork = n == 0
	case accel.OpAddRow:
		kl.k = kAddRow
		ptrs(t[0], t[1], t[2])
		n := int64(t[0].Len())
		kl.i64(n)
		kl.i64(int64(t[0].Cols))
		kl.setGrid(gridFor(n))
		kl.noWork = n == 0
	case accel.OpKVWrite:
		kl.k = kKVWrite
		ptrs(t[0], t[1], t[2], t[3], t[4])
		ints(t[2].Rows, t[0].Cols, t[1].Cols, t[0].Rows)
		blocks(t[2].Rows)
	case accel.OpAttention:
		kl.k = kAttention
		kl.setBlock(attnThreads)
		if c.I[2] > attnMaxHead {
			return nil, fmt.Errorf("cuda: attention with head size %d: the kernel takes at most %d: %w", c.I[2], attnMaxHead, accel.ErrUnsupported)
		}
		ptrs(t[0], t[1], t[2], t[3], t[4], t[5], t[6])
		ints(t[1].Rows, c.I[0], c.I[1], c.I[2], c.I[3], t[6].Rows, t[6].Cols, t[2].Rows)
		if err == nil && int64(t[6].Cols)*int64(c.I[3]) > math.MaxInt32 {
			err = fmt.Errorf("cuda: attention: %d pages of %d positions overflow: %w", t[6].Cols, c.I[3], accel.ErrInvalidArgument)
		}
		blocks(t[1].Rows * c.I[0])
	case accel.OpSiLUMul, accel.OpAdd:
		kl.k = kAdd
		if c.Op == accel.OpSiLUMul {
			kl.k = kSiLUMul
		}
		ptrs(t[0], t[1], t[2])
		n := int64(t[0].Len())
		kl.i64(n)
		kl.setGrid(gridFor(n))
		kl.noWork = n == 0
	case accel.OpArgmax:
		kl.k = kArgmax
		ptrs(t[0], t[1])
		ints(t[1].Rows, t[1].Cols)
		blocks(t[1].Rows)
	case accel.OpSample:
		kl.k = kSample
		ptrs(t[0], t[1], t[2], t[3], t[4], t[5], t[6])
		ints(t[1].Rows, t[1].Cols)
		blocks(t[1].Rows)
	case accel.OpLogProbs:
		kl.k = kLogProbs
		ptrs(t[0], t[1], t[2], t[3])
		ints(t[2].Rows, t[2].Cols, c.I[0])
		blocks(t[2].Rows)
	case accel.OpPenalize:
		kl.k = kPenalize
		ptrs(t[0], t[1], t[2], t[3], t[4], t[5], t[6])
		ints(t[1].Rows, t[1].Cols, t[2].Rows)
		blocks(t[1].Rows)
	case accel.OpCountTokens:
		kl.k = kCountTokens
		ptrs(t[0], t[1], t[2])
		ints(t[1].Rows, t[0].Cols, t[0].Rows)
		kl.setGrid(gridFor(int64(t[1].Rows)))
		kl.noWork = t[1].Rows == 0
	default:
		return nil, fmt.Errorf("cuda: no kernel for %v: %w", c.Op, accel.ErrUnsupported)
	}
	if err != nil {
		return nil, fmt.Errorf("cuda: %v: %w", c.Op, err)
	}
	if kl.gemm == nil {
		if err := kl.check(); err != nil {
			return nil, err
		}
	}
	return kl, nil
}

// gemmFor maps y[T,O] = x[T,I] · W[O,I]ᵀ, all row major, onto column-major
// cuBLAS. A row-major matrix is its transpose in column major, so the call
// computes Yᶜ (O×T, ldc O) = op(Wᶜ) · Xᶜ where Wᶜ is I×O (lda I) taken
// transposed and Xᶜ is I×T (ldb I) as it is: y[t,o] = Σᵢ w[o,i]·x[t,i].
// The pointers are filled in by the caller.
func gemmFor(rows, in, out int) gemm {
	return gemm{transa: cublasOpT, transb: cublasOpN, m: out, n: rows, k: in, lda: in, ldb: in, ldc: out}
}
