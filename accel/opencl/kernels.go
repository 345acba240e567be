//go:build (linux || darwin) && (amd64 || arm64 || riscv64 || loong64)

package opencl

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// The program's kernels.
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
	kCopyU32
	kCopyU8
	kTestUniform
	kRoPETable
	kAddRow
	kKVWriteF16   // OpKVWrite into F16 caches
	kAttentionF16 // OpAttention over F16 caches
	numKernels
)

var kernelNames = [numKernels]string{
	kFill: "k_fill", kEmbedF32: "k_embed_f32", kEmbedBF16: "k_embed_bf16", kRMSNorm: "k_rmsnorm",
	kMatMulF32: "k_matmul_f32", kMatMulBF16: "k_matmul_bf16", kMatMulQ8_0: "k_matmul_q8_0", kMatMulQ4_0: "k_matmul_q4_0",
	kMatMulQ4_K: "k_matmul_q4_k", kMatMulQ6_K: "k_matmul_q6_k", kRoPE: "k_rope", kKVWrite: "k_kv_write",
	kAttention: "k_attention", kSiLUMul: "k_silu_mul", kAdd: "k_add", kArgmax: "k_argmax",
	kSample: "k_sample", kLogProbs: "k_logprobs", kPenalize: "k_penalize", kCountTokens: "k_count_tokens", kCopyU32: "k_copy_u32", kCopyU8: "k_copy_u8", kTestUniform: "k_test_uniform",
	kRoPETable: "k_rope_table", kAddRow: "k_add_row", kKVWriteF16: "k_kv_write_f16", kAttentionF16: "k_attention_f16",
}

const maxArgs = 24

// karg is one kernel argument: size bytes of val (little-endian), or a cl_mem
// handle (size 8) when mem is set.
type karg struct {
	size uintptr
	val  uint64
	mem  bool
}

// klaunch is one kernel launch resolved to OpenCL arguments: what an eager
// launch enqueues and what a graph records.
type klaunch struct {
	k     int
	n     uint64 // work-items needed; the launch is rounded up to whole work-groups
	nargs int
	args  [maxArgs]karg
}

func (kl *klaunch) add(a karg) { kl.args[kl.nargs] = a; kl.nargs++ }

func (kl *klaunch) memArg(h uintptr) { kl.add(karg{size: 8, val: uint64(h), mem: true}) }
func (kl *klaunch) u64(v uint64)     { kl.add(karg{size: 8, val: v}) }
func (kl *klaunch) u32(v uint32)     { kl.add(karg{size: 4, val: uint64(v)}) }
func (kl *klaunch) f32(v float32)    { kl.add(karg{size: 4, val: uint64(math.Float32bits(v))}) }

// i32 adds an int dimension, which kernels take as a 32-bit int.
func (kl *klaunch) i32(v int) error {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return fmt.Errorf("opencl: dimension %d does not fit a 32-bit kernel argument: %w", v, accel.ErrInvalidArgument)
	}
	kl.u32(uint32(int32(v)))
	return nil
}

// buf adds a device buffer view as (cl_mem, element offset).
func (d *Device) buf(kl *klaunch, b accel.Buffer, elem int64) error {
	m, ok := d.memOf(b)
	if !ok {
		return fmt.Errorf("opencl: %v is not memory of this device: %w", b, accel.ErrInvalidArgument)
	}
	if b.Offset()%elem != 0 {
		return fmt.Errorf("opencl: %v starts at byte %d, not a multiple of its %d-byte elements: %w", b, b.Offset(), elem, accel.ErrInvalidArgument)
	}
	kl.memArg(m.h)
	kl.u64(uint64(b.Offset() / elem))
	return nil
}

// tensor adds a tensor as (cl_mem, offset): in bytes for quantized blocks,
// else in elements of DType.Size() bytes (2 for BF16 and F16 KV caches).
func (d *Device) tensor(kl *klaunch, t accel.Tensor) error {
	if t.DType.BlockSize() > 1 {
		return d.buf(kl, t.Buf, 1) // quantized blocks: addressed in bytes
	}
	return d.buf(kl, t.Buf, t.DType.Size())
}

// prepare resolves a validated call to its kernel and arguments.
func (d *Device) prepare(c *accel.Call) (*klaunch, error) {
	kl := &klaunch{}
	t := c.T
	var err error
	tensors := func(ts ...accel.Tensor) {
		for _, x := range ts {
			if err == nil {
				err = d.tensor(kl, x)
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
	switch c.Op {
	case accel.OpFill:
		kl.k = kFill
		tensors(t[0])
		n := uint64(t[0].Len())
		kl.u64(n)
		if t[0].DType == accel.I32 {
			kl.u32(uint32(int32(c.I[0])))
		} else {
			kl.u32(math.Float32bits(c.F[0]))
		}
		kl.n = n
	case accel.OpEmbed, accel.OpGatherRows:
		kl.k = kEmbedF32
		if t[1].DType == accel.BF16 {
			kl.k = kEmbedBF16
		}
		tensors(t[0], t[1], t[2])
		ints(t[0].Rows, t[0].Cols, t[1].Rows)
		kl.n = uint64(t[0].Rows) * uint64(t[0].Cols)
	case accel.OpRMSNorm:
		kl.k = kRMSNorm
		tensors(t[0], t[1], t[2])
		ints(t[1].Rows, t[1].Cols)
		kl.f32(c.F[0])
		kl.n = uint64(t[1].Rows)
	case accel.OpMatMul:
		switch t[2].DType {
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
		tensors(t[0], t[1], t[2])
		ints(t[1].Rows, t[1].Cols, t[0].Cols)
		kl.n = uint64(t[0].Rows) * uint64(t[0].Cols)
	case accel.OpRoPE:
		kl.k = kRoPE
		hd := c.I[0]
		tensors(t[0], t[1], t[2])
		if err == nil {
			var f uintptr
			if f, err = d.rope(hd, c.F[0]); err == nil {
				kl.memArg(f)
			}
		}
		ints(t[0].Rows, hd, t[0].Cols, t[1].Cols)
		kl.n = uint64(t[0].Rows) * uint64(hd/2)
	case accel.OpRoPETable:
		kl.k = kRoPETable
		hd := c.I[0]
		tensors(t[0], t[1], t[2], t[3])
		ints(t[0].Rows, hd, t[0].Cols, t[1].Cols, c.I[1])
		kl.n = uint64(t[0].Rows) * uint64(hd/2)
	case accel.OpAddRow:
		kl.k = kAddRow
		tensors(t[0], t[1], t[2])
		n := uint64(t[0].Len())
		kl.u64(n)
		kl.u64(uint64(t[0].Cols))
		kl.n = n
	case accel.OpKVWrite:
		kl.k = kKVWrite
		if t[0].DType == accel.F16 {
			kl.k = kKVWriteF16
		}
		tensors(t[0], t[1], t[2], t[3], t[4])
		ints(t[2].Rows, t[0].Cols, t[1].Cols, t[0].Rows)
		kl.n = uint64(t[2].Rows)
	case accel.OpAttention:
		kl.k = kAttention
		if t[2].DType == accel.F16 {
			kl.k = kAttentionF16
		}
		tensors(t[0], t[1], t[2], t[3], t[4], t[5], t[6])
		ints(t[1].Rows, c.I[0], c.I[1], c.I[2], c.I[3], t[6].Rows, t[6].Cols, t[2].Rows)
		if err == nil && c.I[3] > 0 && t[6].Cols > math.MaxInt32/c.I[3] {
			err = fmt.Errorf("opencl: attention: %d pages of %d positions overflow: %w", t[6].Cols, c.I[3], accel.ErrInvalidArgument)
		}
		kl.n = uint64(t[1].Rows) * uint64(c.I[0])
	case accel.OpSiLUMul, accel.OpAdd:
		kl.k = kAdd
		if c.Op == accel.OpSiLUMul {
			kl.k = kSiLUMul
		}
		tensors(t[0], t[1], t[2])
		n := uint64(t[0].Len())
		kl.u64(n)
		kl.n = n
	case accel.OpArgmax:
		kl.k = kArgmax
		tensors(t[0], t[1])
		ints(t[1].Rows, t[1].Cols)
		kl.n = uint64(t[1].Rows)
	case accel.OpSample:
		kl.k = kSample
		tensors(t[0], t[1], t[2], t[3], t[4], t[5], t[6])
		ints(t[1].Rows, t[1].Cols)
		kl.n = uint64(t[1].Rows)
	case accel.OpLogProbs:
		kl.k = kLogProbs
		tensors(t[0], t[1], t[2], t[3])
		ints(t[2].Rows, t[2].Cols, c.I[0])
		kl.n = uint64(t[2].Rows)
	case accel.OpPenalize:
		kl.k = kPenalize
		tensors(t[0], t[1], t[2], t[3], t[4], t[5], t[6])
		ints(t[1].Rows, t[1].Cols, t[2].Rows)
		kl.n = uint64(t[1].Rows)
	case accel.OpCountTokens:
		kl.k = kCountTokens
		tensors(t[0], t[1], t[2])
		ints(t[1].Rows, t[0].Cols, t[0].Rows)
		kl.n = uint64(t[1].Rows)
	default:
		return nil, fmt.Errorf("opencl: no kernel for %v: %w", c.Op, accel.ErrUnsupported)
	}
	if err != nil {
		return nil, fmt.Errorf("opencl: %v: %w", c.Op, err)
	}
	return kl, nil
}

// copyLaunch is a device copy as a kernel (for graphs): whole 32-bit words
// when both ends and the length allow, else bytes.
func copyLaunch(dst uintptr, doff int64, src uintptr, soff int64, n int64) *klaunch {
	kl := &klaunch{}
	elem := int64(1)
	kl.k = kCopyU8
	if doff%4 == 0 && soff%4 == 0 && n%4 == 0 {
		elem = 4
		kl.k = kCopyU32
	}
	kl.memArg(dst)
	kl.u64(uint64(doff / elem))
	kl.memArg(src)
	kl.u64(uint64(soff / elem))
	kl.u64(uint64(n / elem))
	kl.n = uint64(n / elem)
	return kl
}

// setArgs sets a kernel object's arguments from a launch.
func (d *Device) setArgs(k uintptr, kl *klaunch) error {
	for i := 0; i < kl.nargs; i++ {
		a := &kl.args[i]
		if err := check("clSetKernelArg", callErr(d.l.setKernelArg, k, uintptr(i), a.size, uintptr(unsafe.Pointer(&a.val)))); err != nil {
			return fmt.Errorf("%s argument %d: %w", kernelNames[kl.k], i, err)
		}
	}
	return nil
}

// global is the launch size: n rounded up to whole work-groups.
func (d *Device) global(n uint64) uintptr {
	l := uint64(d.sh.local)
	return uintptr((n + l - 1) / l * l)
}

// newKernel makes a kernel object of the shared program.
func (d *Device) newKernel(k int) (uintptr, error) {
	var code int32
	name := cbytes(kernelNames[k])
	h := call(d.l.createKernel, d.sh.prog, uintptr(unsafe.Pointer(&name[0])), uintptr(unsafe.Pointer(&code)))
	if err := check("clCreateKernel("+kernelNames[k]+")", code); err != nil {
		return 0, err
	}
	return h, nil
}
