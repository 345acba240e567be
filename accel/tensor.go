package accel

import (
	"fmt"

	"github.com/reprise-ml/reprise/quant"
)

// DType is an element type of device data.
type DType uint8

// The element types kernels read and write.
const (
	F32  DType = iota + 1 // IEEE float32
	I32                   // int32
	BF16                  // bfloat16 (weights only), widened to float32 on load

	// Block-quantized weights in ggml's formats (package quant), blocks
	// along each row (the input axis of a MatMul's W): a row of Cols
	// elements is Cols/BlockSize blocks, and Cols must be a multiple of it.
	Q8_0 // ggml Q8_0: 32 int8 and an f16 scale per block
	Q4_0 // ggml Q4_0: 32 4-bit and an f16 scale per block
	Q4_K // ggml Q4_K: super-blocks of 256, 6-bit scales and mins per 32
	Q6_K // ggml Q6_K: super-blocks of 256, int8 scales per 16

	// F16 is IEEE binary16, for KV caches (OpKVWrite, OpAttention) on
	// devices whose Capability has KVCacheF16: stored rounded to nearest
	// even, widened to float32 exactly on load.
	F16
)

// Size is the element's size in bytes, 0 for a block-quantized type (see
// RowBytes).
func (d DType) Size() int64 {
	switch d {
	case F32, I32:
		return 4
	case BF16, F16:
		return 2
	}
	return 0
}

// Quant is the ggml type of a block-quantized DType; ok is false for the
// others.
func (d DType) Quant() (t quant.Type, ok bool) {
	switch d {
	case Q8_0:
		return quant.Q8_0, true
	case Q4_0:
		return quant.Q4_0, true
	case Q4_K:
		return quant.Q4_K, true
	case Q6_K:
		return quant.Q6_K, true
	}
	return 0, false
}

// QuantDType is the DType holding ggml type t as it is, if there is one.
func QuantDType(t quant.Type) (DType, bool) {
	for _, d := range []DType{Q8_0, Q4_0, Q4_K, Q6_K} {
		if q, _ := d.Quant(); q == t {
			return d, true
		}
	}
	return 0, false
}

// BlockSize is the number of elements of one block: 1 for the element
// types, 32 or 256 for the quantized ones, 0 for an unknown DType.
func (d DType) BlockSize() int {
	if q, ok := d.Quant(); ok {
		return q.BlockSize()
	}
	if d.Size() > 0 {
		return 1
	}
	return 0
}

// RowBytes is the storage of a row of cols elements (cols a multiple of
// BlockSize).
func (d DType) RowBytes(cols int) int64 {
	if q, ok := d.Quant(); ok {
		return int64(cols/q.BlockSize()) * int64(q.BlockBytes())
	}
	return int64(cols) * d.Size()
}

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case I32:
		return "i32"
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	case Q8_0:
		return "q8_0"
	case Q4_0:
		return "q4_0"
	case Q4_K:
		return "q4_k"
	case Q6_K:
		return "q6_k"
	}
	return fmt.Sprintf("dtype(%d)", d)
}

// Tensor is a row-major matrix of Rows x Cols elements in a Buffer. Every
// operand of a kernel is a Tensor; vectors are one row. A Tensor is a value:
// Rows(0, n) is a leading slice of the same storage, the way a smaller bucket
// uses the first rows of a larger bucket's static buffer.
type Tensor struct {
	Buf   Buffer
	DType DType
	Rows  int
	Cols  int
}

// NewTensor views b as a rows x cols matrix of dt. It fails when b is too small.
func NewTensor(b Buffer, dt DType, rows, cols int) (Tensor, error) {
	t := Tensor{Buf: b, DType: dt, Rows: rows, Cols: cols}
	if rows < 0 || cols < 0 || dt.BlockSize() == 0 || cols%dt.BlockSize() != 0 {
		return Tensor{}, fmt.Errorf("accel: bad tensor shape %v", t)
	}
	if t.Bytes() > b.Len() {
		return Tensor{}, fmt.Errorf("accel: tensor %v needs %d bytes, buffer has %d", t, t.Bytes(), b.Len())
	}
	return t, nil
}

// Bytes is the storage the tensor spans.
func (t Tensor) Bytes() int64 { return int64(t.Rows) * t.DType.RowBytes(t.Cols) }

// Len is the number of elements.
func (t Tensor) Len() int { return t.Rows * t.Cols }

// IsNil reports whether the tensor views no storage.
func (t Tensor) IsNil() bool { return t.Buf.IsNil() }

// RowSlice returns rows [r0, r1) of t, sharing its storage.
func (t Tensor) RowSlice(r0, r1 int) Tensor {
	if r0 < 0 || r1 < r0 || r1 > t.Rows {
		panic(fmt.Sprintf("accel: RowSlice(%d, %d) of %v", r0, r1, t))
	}
	rb := t.DType.RowBytes(t.Cols)
	return Tensor{Buf: t.Buf.Slice(int64(r0)*rb, int64(r1-r0)*rb), DType: t.DType, Rows: r1 - r0, Cols: t.Cols}
}

// Reshape views the same elements as rows x cols.
func (t Tensor) Reshape(rows, cols int) Tensor {
	if rows*cols != t.Rows*t.Cols {
		panic(fmt.Sprintf("accel: Reshape(%d, %d) of %v", rows, cols, t))
	}
	t.Rows, t.Cols = rows, cols
	return t
}

func (t Tensor) String() string {
	return fmt.Sprintf("%s[%dx%d]", t.DType, t.Rows, t.Cols)
}
