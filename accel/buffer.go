package accel

import "fmt"

// Memory is one allocation a backend made from its device: a segment of the
// caching allocator, a cl_mem, a CUdeviceptr range. Only the backend that made
// it looks inside; everything else sees Buffers, views into it.
type Memory interface {
	// Size is the allocation's length in bytes.
	Size() int64
}

// Buffer is a view of device memory: bytes [off, off+n) of one allocation. The
// zero Buffer is nil. Buffers are values; slicing one makes a new view of the
// same storage, never a copy, so a captured graph that recorded a Buffer reads
// whatever the storage holds when it replays.
type Buffer struct {
	mem Memory
	off int64
	n   int64
}

// NewBuffer makes a view of m. Backends and allocators call it; it panics on a
// range outside m, which is a programming error in the caller.
func NewBuffer(m Memory, off, n int64) Buffer {
	if m == nil || off < 0 || n < 0 || off+n > m.Size() {
		panic(fmt.Sprintf("accel: buffer [%d,+%d) outside its allocation", off, n))
	}
	return Buffer{mem: m, off: off, n: n}
}

// Memory returns the allocation the view belongs to (nil for the nil Buffer).
func (b Buffer) Memory() Memory { return b.mem }

// Offset is the view's first byte within its allocation.
func (b Buffer) Offset() int64 { return b.off }

// Len is the view's length in bytes.
func (b Buffer) Len() int64 { return b.n }

// IsNil reports whether b views nothing.
func (b Buffer) IsNil() bool { return b.mem == nil }

// Slice returns bytes [off, off+n) of b. Out of range panics, as slicing does.
func (b Buffer) Slice(off, n int64) Buffer {
	if off < 0 || n < 0 || off+n > b.n {
		panic(fmt.Sprintf("accel: Slice(%d, %d) of a %d-byte buffer", off, n, b.n))
	}
	return Buffer{mem: b.mem, off: b.off + off, n: n}
}

// Overlaps reports whether two views share any byte.
func (b Buffer) Overlaps(c Buffer) bool {
	return b.mem != nil && b.mem == c.mem && b.off < c.off+c.n && c.off < b.off+b.n
}

func (b Buffer) String() string {
	if b.mem == nil {
		return "buffer(nil)"
	}
	return fmt.Sprintf("buffer(%p+%d,%d)", b.mem, b.off, b.n)
}

// HostMemory is host memory a device can copy to and from asynchronously
// (pinned, page-locked memory on a GPU; ordinary memory on the CPU device).
type HostMemory interface {
	// Bytes is the whole allocation as host-visible bytes.
	Bytes() []byte
}

// HostBuffer is a view of pinned host memory, the source or destination of an
// asynchronous copy. Its bytes must not be touched while a copy that uses them
// is in flight: record an event after the copy and wait for it first.
type HostBuffer struct {
	mem HostMemory
	off int64
	n   int64
}

// NewHostBuffer makes a view of all of m.
func NewHostBuffer(m HostMemory) HostBuffer {
	return HostBuffer{mem: m, n: int64(len(m.Bytes()))}
}

// Memory returns the host allocation the view belongs to.
func (h HostBuffer) Memory() HostMemory { return h.mem }

// Offset is the view's first byte within its allocation.
func (h HostBuffer) Offset() int64 { return h.off }

// Len is the view's length in bytes.
func (h HostBuffer) Len() int64 { return h.n }

// IsNil reports whether h views nothing.
func (h HostBuffer) IsNil() bool { return h.mem == nil }

// Bytes is the view's bytes.
func (h HostBuffer) Bytes() []byte {
	if h.mem == nil {
		return nil
	}
	return h.mem.Bytes()[h.off : h.off+h.n]
}

// Slice returns bytes [off, off+n) of h. Out of range panics.
func (h HostBuffer) Slice(off, n int64) HostBuffer {
	if off < 0 || n < 0 || off+n > h.n {
		panic(fmt.Sprintf("accel: Slice(%d, %d) of a %d-byte host buffer", off, n, h.n))
	}
	return HostBuffer{mem: h.mem, off: h.off + off, n: n}
}
