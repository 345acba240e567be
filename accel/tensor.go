package accel

import "fmt"

// DType is an element type of device data.
type DType uint8

// The element types kernels read and write.
const (
	F32  DType = iota + 1 // IEEE float32
	I32                   // int32
	BF16                  // bfloat16 (weights only), widened to float32 on load
)

// Size is the element's size in bytes.
func (d DType) Size() int64 {
	switch d {
	case F32, I32:
		return 4
	case BF16:
		return 2
	}
	return 0
}

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case I32:
		return "i32"
	case BF16:
		return "bf16"
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
	if rows < 0 || cols < 0 || dt.Size() == 0 {
		return Tensor{}, fmt.Errorf("accel: bad tensor shape %v", t)
	}
	if t.Bytes() > b.Len() {
		return Tensor{}, fmt.Errorf("accel: tensor %v needs %d bytes, buffer has %d", t, t.Bytes(), b.Len())
	}
	return t, nil
}

// Bytes is the storage the tensor spans.
func (t Tensor) Bytes() int64 { return int64(t.Rows) * int64(t.Cols) * t.DType.Size() }

// Len is the number of elements.
func (t Tensor) Len() int { return t.Rows * t.Cols }

// IsNil reports whether the tensor views no storage.
func (t Tensor) IsNil() bool { return t.Buf.IsNil() }

// RowSlice returns rows [r0, r1) of t, sharing its storage.
func (t Tensor) RowSlice(r0, r1 int) Tensor {
	if r0 < 0 || r1 < r0 || r1 > t.Rows {
		panic(fmt.Sprintf("accel: RowSlice(%d, %d) of %v", r0, r1, t))
	}
	rb := int64(t.Cols) * t.DType.Size()
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
