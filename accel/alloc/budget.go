package alloc

import (
	"fmt"
	"sync/atomic"

	"github.com/reprise-ml/reprise/accel"
)

// Budget is a device's memory capacity and what is charged against it: the
// segments the caching allocator holds, and what executables (and, on the
// CPU device, packed weights) hold outside any pool. Every backend keeps one
// per device; it is safe for concurrent use.
type Budget struct {
	name     string
	capacity int64
	reserved atomic.Int64
}

// NewBudget makes the budget of a device of capacity bytes; name ("cpu",
// "opencl", "cuda") begins its errors. A capacity below one segment is
// refused: the allocator could not hold anything.
func NewBudget(name string, capacity int64) (*Budget, error) {
	if capacity < SegmentSize {
		return nil, fmt.Errorf("%s: memory capacity %d is below one %d-byte segment", name, capacity, SegmentSize)
	}
	return &Budget{name: name, capacity: capacity}, nil
}

// Charge takes n bytes of the capacity, or takes nothing and fails with an
// error wrapping accel.ErrOutOfMemory that says what was asked and what was
// free.
func (b *Budget) Charge(n int64) error {
	for {
		r := b.reserved.Load()
		if r+n > b.capacity {
			return fmt.Errorf("%s: %d bytes asked, %d of %d free: %w", b.name, n, b.capacity-r, b.capacity, accel.ErrOutOfMemory)
		}
		if b.reserved.CompareAndSwap(r, r+n) {
			return nil
		}
	}
}

// Uncharge gives back n bytes an earlier Charge took.
func (b *Budget) Uncharge(n int64) { b.reserved.Add(-n) }

// Capacity is the device memory the budget allows, in bytes.
func (b *Budget) Capacity() int64 { return b.capacity }

// MemInfo is exact: the capacity less everything charged.
func (b *Budget) MemInfo() accel.MemInfo {
	return accel.MemInfo{Free: b.capacity - b.reserved.Load(), Total: b.capacity}
}

// DeviceMemory is the memory half of an accel.Device, the same in every
// backend: MemInfo from the device's Budget, the caching allocator over the
// backend's Source, and Alloc, Free and NewPool on it. A backend's device
// embeds it, through an unexported alias so that the embedded field stays
// private and only these methods are promoted; a backend that needs more
// (the CPU device's Free drops packed weights, the CUDA device's MemInfo asks
// the driver too) defines its own method over the embedded one.
type DeviceMemory struct {
	budget *Budget
	alloc  *Caching
	open   func() error
}

// NewDeviceMemory puts a caching allocator over src, whose segments src
// charges to b. open reports an error wrapping accel.ErrClosed once the
// device is closed; Alloc and NewPool ask it first.
func NewDeviceMemory(b *Budget, src Source, open func() error) *DeviceMemory {
	return &DeviceMemory{budget: b, alloc: New(src), open: open}
}

// MemInfo is the budget's: the capacity less every segment and executable
// held.
func (m *DeviceMemory) MemInfo() accel.MemInfo { return m.budget.MemInfo() }

// Allocator is the device's caching allocator.
func (m *DeviceMemory) Allocator() accel.Allocator { return m.alloc }

// Caching exposes the allocator's full interface (pools, captures, Check) to
// the backend, to tests and to the graph runner's planning.
func (m *DeviceMemory) Caching() *Caching { return m.alloc }

// Alloc allocates from the default pool, not tied to a stream.
func (m *DeviceMemory) Alloc(n int64) (accel.Buffer, error) {
	if err := m.open(); err != nil {
		return accel.Buffer{}, err
	}
	return m.alloc.Alloc(0, n)
}

// Free returns a buffer from Alloc.
func (m *DeviceMemory) Free(b accel.Buffer) error { return m.alloc.Free(b) }

// NewPool makes a graph pool.
func (m *DeviceMemory) NewPool() (accel.Pool, error) {
	if err := m.open(); err != nil {
		return nil, err
	}
	return m.alloc.NewPool(), nil
}
