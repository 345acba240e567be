package cpu

import (
	"sync/atomic"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// mem is one segment of the arena. Go never moves heap memory, so the bytes
// stay at one address for the segment's life, as device memory does.
type mem struct {
	b []byte
	// packs lists the packed weight copies made from this segment's bytes
	// (see pack.go); nil when there are none, so that a write to a segment
	// without any costs one atomic load.
	packs atomic.Pointer[[]*packEntry]
	// readOnly marks a segment that aliases the caller's host bytes
	// (alias.go): never written, released through release.
	readOnly bool
	release  func()
}

func newMem(n int64) *mem { return &mem{b: make([]byte, n)} }

func (m *mem) Size() int64 { return int64(len(m.b)) }

type hostMem struct{ b []byte }

func (h *hostMem) Bytes() []byte { return h.b }

// bytesOf resolves a device buffer to its bytes. It panics on a buffer of
// another backend: launches validated by accel never pass one.
func bytesOf(b accel.Buffer) []byte {
	if b.IsNil() || b.Len() == 0 {
		return nil
	}
	m := b.Memory().(*mem)
	return m.b[b.Offset() : b.Offset()+b.Len() : b.Offset()+b.Len()]
}

func ownBuffer(b accel.Buffer) bool {
	_, ok := b.Memory().(*mem)
	return ok
}

// operand is a tensor resolved to memory: its bytes, and the segment and
// offset they live at (for the packed-weight cache).
type operand struct {
	b          []byte
	rows, cols int
	dt         accel.DType
	m          *mem
	off        int64
}

func resolve(t accel.Tensor) operand {
	o := operand{b: bytesOf(t.Buf)[:t.Bytes():t.Bytes()], rows: t.Rows, cols: t.Cols, dt: t.DType}
	if !t.Buf.IsNil() {
		o.m, o.off = t.Buf.Memory().(*mem), t.Buf.Offset()
	}
	return o
}

// memOf is the segment and offset of a device buffer (nil for an empty one).
func memOf(b accel.Buffer) (*mem, int64) {
	if b.IsNil() || b.Len() == 0 {
		return nil, 0
	}
	return b.Memory().(*mem), b.Offset()
}

func (o operand) f32() []float32 {
	n := len(o.b) / 4
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&o.b[0])), n)
}

func (o operand) i32() []int32 {
	n := len(o.b) / 4
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&o.b[0])), n)
}

func (o operand) u16() []uint16 {
	n := len(o.b) / 2
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&o.b[0])), n)
}
