//go:build (linux || darwin) && (amd64 || arm64 || riscv64 || loong64)

package opencl

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
)

// clMem is one segment of the caching allocator: a cl_mem of the device.
// Buffers are (segment, offset) views of it, so kernels take an element
// offset with every buffer.
type clMem struct {
	d    *Device
	h    uintptr
	size int64
}

func (m *clMem) Size() int64 { return m.size }

type source struct{ d *Device }

// AllocSegment charges the capacity, then makes a cl_mem. A device that
// cannot make it (its own memory, or its largest allocation) is out of memory.
func (s source) AllocSegment(n int64) (accel.Memory, error) {
	d := s.d
	if n > d.maxAlloc {
		return nil, fmt.Errorf("opencl: a %d-byte segment exceeds the device's largest allocation (%d bytes): %w", n, d.maxAlloc, accel.ErrOutOfMemory)
	}
	if err := d.budget.Charge(n); err != nil {
		return nil, err
	}
	var code int32
	h := call(d.l.createBuffer, d.sh.ctx, clMemReadWrite, uintptr(n), 0, uintptr(unsafe.Pointer(&code)))
	if err := check("clCreateBuffer", code); err != nil {
		d.budget.Uncharge(n)
		return nil, fmt.Errorf("opencl: %d-byte segment: %w", n, err)
	}
	m := &clMem{d: d, h: h, size: n}
	d.mu.Lock()
	d.segs[m] = struct{}{}
	d.mu.Unlock()
	return m, nil
}

// FreeSegment releases the cl_mem. OpenCL keeps it until the commands already
// enqueued on it have run.
func (s source) FreeSegment(m accel.Memory) {
	cm := m.(*clMem)
	d := s.d
	d.mu.Lock()
	_, live := d.segs[cm]
	delete(d.segs, cm)
	d.mu.Unlock()
	if live {
		call(d.l.releaseMemObject, cm.h)
		d.budget.Uncharge(cm.size)
	}
}

func (s source) MemInfo() accel.MemInfo { return s.d.MemInfo() }

// memOf resolves a buffer of this device to its cl_mem, or 0.
func (d *Device) memOf(b accel.Buffer) (*clMem, bool) {
	m, ok := b.Memory().(*clMem)
	if !ok || m.d != d {
		return nil, false
	}
	return m, true
}

// hostMem is pinned host memory: a CL_MEM_ALLOC_HOST_PTR cl_mem, mapped once
// for its whole life, so its bytes are the mapped region and a device copy
// from or to the cl_mem never touches Go memory.
type hostMem struct {
	d    *Device
	h    uintptr
	ptr  uintptr
	size uintptr // of the cl_mem (at least 1)
	b    []byte

	mu    sync.Mutex
	freed bool
}

func (h *hostMem) Bytes() []byte { return h.b }

// AllocHost allocates n bytes of pinned host memory.
func (d *Device) AllocHost(n int64) (accel.HostBuffer, error) {
	if n < 0 {
		return accel.HostBuffer{}, fmt.Errorf("opencl: negative host allocation %d: %w", n, accel.ErrInvalidArgument)
	}
	if err := d.check(); err != nil {
		return accel.HostBuffer{}, err
	}
	size := uintptr(max(n, 1))
	var code int32
	h := call(d.l.createBuffer, d.sh.ctx, clMemReadWrite|clMemAllocHostPtr, size, 0, uintptr(unsafe.Pointer(&code)))
	if err := check("clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)", code); err != nil {
		return accel.HostBuffer{}, fmt.Errorf("opencl: %d bytes of pinned host memory: %w", n, err)
	}
	ptr := call(d.l.enqueueMapBuffer, d.aux, h, 1, clMapRead|clMapWrite, 0, size, 0, 0, 0, uintptr(unsafe.Pointer(&code)))
	if err := check("clEnqueueMapBuffer", code); err != nil {
		call(d.l.releaseMemObject, h)
		return accel.HostBuffer{}, fmt.Errorf("opencl: mapping %d bytes of pinned host memory: %w", n, err)
	}
	hm := &hostMem{d: d, h: h, ptr: ptr, size: size}
	hm.b = unsafe.Slice((*byte)(cPointer(ptr)), n)
	return accel.NewHostBuffer(hm), nil
}

// FreeHost unmaps and releases pinned host memory. Its bytes must not be used
// afterwards.
func (d *Device) FreeHost(hb accel.HostBuffer) error {
	if hb.IsNil() {
		return nil
	}
	hm, ok := hb.Memory().(*hostMem)
	if !ok || hm.d != d {
		return fmt.Errorf("opencl: free of host memory from another device: %w", accel.ErrInvalidArgument)
	}
	hm.mu.Lock()
	defer hm.mu.Unlock()
	if hm.freed {
		return nil
	}
	hm.freed = true
	hm.b = nil
	var err error
	if d.check() == nil { // after Close the aux queue is gone; releasing suffices
		err = check("clEnqueueUnmapMemObject", callErr(d.l.enqueueUnmapMemObject, d.aux, hm.h, hm.ptr, 0, 0, 0))
	}
	call(d.l.releaseMemObject, hm.h)
	return err
}

// hostOf resolves a host buffer of this device.
func (d *Device) hostOf(h accel.HostBuffer) (*hostMem, bool) {
	hm, ok := h.Memory().(*hostMem)
	if !ok || hm.d != d {
		return nil, false
	}
	return hm, true
}
