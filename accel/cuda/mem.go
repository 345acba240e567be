//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// devMem is one segment of the caching allocator: a cuMemAlloc_v2
// allocation. Buffers are (segment, offset) views; a buffer's device address
// is the segment's base plus the view's offset.
type devMem struct {
	d    *Device
	ptr  uint64 // CUdeviceptr
	size int64
}

func (m *devMem) Size() int64 { return m.size }

type source struct{ d *Device }

// AllocSegment charges the capacity, then asks the driver. Either refusing is
// accel.ErrOutOfMemory. The call runs in relaxed capture mode: a capture
// whose pool grows allocates on the capturing thread, which cuMemAlloc would
// otherwise invalidate.
func (s source) AllocSegment(n int64) (accel.Memory, error) {
	d := s.d
	if err := d.check(); err != nil {
		return nil, err
	}
	if err := d.budget.Charge(n); err != nil {
		return nil, err
	}
	d.enter()
	prev := d.relaxed()
	var p uint64
	err := d.drv.err("cuMemAlloc_v2", call32(d.drv.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)))
	d.restore(prev)
	d.leave()
	if err != nil {
		d.budget.Uncharge(n)
		return nil, fmt.Errorf("cuda: a %d-byte segment: %w", n, err)
	}
	m := &devMem{d: d, ptr: p, size: n}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.enter()
		call32(d.drv.cuMemFree, uintptr(p))
		d.leave()
		d.budget.Uncharge(n)
		return nil, fmt.Errorf("cuda: device: %w", accel.ErrClosed)
	}
	d.segs[m] = struct{}{}
	d.mu.Unlock()
	return m, nil
}

// FreeSegment returns a segment to the driver, or, while a stream captures,
// keeps it until the capture ends (cuMemFree may synchronise the device).
// The capacity is uncharged when the driver has it back.
func (s source) FreeSegment(mem accel.Memory) {
	m := mem.(*devMem)
	d := s.d
	d.mu.Lock()
	_, live := d.segs[m]
	delete(d.segs, m)
	if !live || d.closed {
		d.mu.Unlock()
		return
	}
	if d.capturing > 0 {
		d.deferred = append(d.deferred, m)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	d.freeSegment(m)
}

func (s source) MemInfo() accel.MemInfo { return s.d.MemInfo() }

func (d *Device) freeSegment(m *devMem) {
	d.enter()
	prev := d.relaxed()
	call32(d.drv.cuMemFree, uintptr(m.ptr))
	d.restore(prev)
	d.leave()
	d.budget.Uncharge(m.size)
}

// resolve is a buffer's device address, checking that it is this device's
// memory and starts on an element boundary.
func (d *Device) resolve(b accel.Buffer, elem int64) (uint64, error) {
	m, ok := b.Memory().(*devMem)
	if !ok || m.d != d {
		return 0, fmt.Errorf("cuda: %v is not memory of this device: %w", b, accel.ErrInvalidArgument)
	}
	if elem > 1 && b.Offset()%elem != 0 {
		return 0, fmt.Errorf("cuda: %v starts at byte %d, not a multiple of its %d-byte elements: %w", b, b.Offset(), elem, accel.ErrInvalidArgument)
	}
	return m.ptr + uint64(b.Offset()), nil
}

// hostMem is pinned host memory from cuMemHostAlloc (portable): its bytes are
// the pinned region itself.
type hostMem struct {
	d    *Device
	ptr  uintptr
	size uintptr                // of the allocation (at least 1)
	b    atomic.Pointer[[]byte] // nil once freed
}

func (h *hostMem) Bytes() []byte {
	if p := h.b.Load(); p != nil {
		return *p
	}
	return nil
}

// AllocHost allocates n bytes of pinned host memory.
func (d *Device) AllocHost(n int64) (accel.HostBuffer, error) {
	if n < 0 {
		return accel.HostBuffer{}, fmt.Errorf("cuda: negative host allocation %d: %w", n, accel.ErrInvalidArgument)
	}
	if err := d.check(); err != nil {
		return accel.HostBuffer{}, err
	}
	size := uintptr(max(n, 1))
	d.enter()
	prev := d.relaxed()
	var p uintptr
	err := d.drv.err("cuMemHostAlloc", call32(d.drv.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), size, cuMemHostAllocPortable))
	d.restore(prev)
	d.leave()
	if err != nil {
		return accel.HostBuffer{}, fmt.Errorf("cuda: %d bytes of pinned host memory: %w", n, err)
	}
	hm := &hostMem{d: d, ptr: p, size: size}
	b := unsafe.Slice((*byte)(cPointer(p)), n)
	hm.b.Store(&b)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.freeHost(hm)
		return accel.HostBuffer{}, fmt.Errorf("cuda: device: %w", accel.ErrClosed)
	}
	d.hosts[hm] = struct{}{}
	d.mu.Unlock()
	return accel.NewHostBuffer(hm), nil
}

// FreeHost releases pinned host memory; its bytes must not be used
// afterwards (they read as nil).
func (d *Device) FreeHost(hb accel.HostBuffer) error {
	if hb.IsNil() {
		return nil
	}
	hm, ok := hb.Memory().(*hostMem)
	if !ok || hm.d != d {
		return fmt.Errorf("cuda: free of host memory from another device: %w", accel.ErrInvalidArgument)
	}
	d.mu.Lock()
	_, live := d.hosts[hm]
	delete(d.hosts, hm)
	if !live || d.closed {
		d.mu.Unlock()
		return nil
	}
	hm.b.Store(nil)
	if d.capturing > 0 {
		d.dhosts = append(d.dhosts, hm)
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	d.freeHost(hm)
	return nil
}

func (d *Device) freeHost(hm *hostMem) {
	hm.b.Store(nil)
	d.enter()
	prev := d.relaxed()
	call32(d.drv.cuMemFreeHost, hm.ptr)
	d.restore(prev)
	d.leave()
}

// hostOf resolves a live host buffer of this device.
func (d *Device) hostOf(h accel.HostBuffer) (*hostMem, bool) {
	hm, ok := h.Memory().(*hostMem)
	if !ok || hm.d != d || hm.b.Load() == nil {
		return nil, false
	}
	return hm, true
}
