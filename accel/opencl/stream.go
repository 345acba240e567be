//go:build (linux || darwin) && (amd64 || arm64 || riscv64 || loong64)

package opencl

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/alloc"
)

// stream is one in-order command queue.
type stream struct {
	d  *Device
	id int64
	q  uintptr

	// mu serialises setting a kernel object's arguments and enqueueing it.
	mu      sync.Mutex
	kernels [numKernels]uintptr
	closed  bool

	// capture state; touched only by the host goroutine that owns the stream
	cap *alloc.Capture[node]
}

// NewStream makes a stream with its own command queue.
func (d *Device) NewStream() (accel.Stream, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	q, err := d.newQueue()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.nextID++
	s := &stream{d: d, id: d.nextID, q: q}
	d.streams[s] = struct{}{}
	d.mu.Unlock()
	return s, nil
}

func (s *stream) Device() accel.Device { return s.d }

func (s *stream) closedErr() error {
	return fmt.Errorf("opencl: stream %d: %w", s.id, accel.ErrClosed)
}

// enqueue sets the stream's kernel object's arguments and enqueues it.
func (s *stream) enqueue(kl *klaunch) error {
	if kl.n == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedErr()
	}
	k := s.kernels[kl.k]
	if k == 0 {
		var err error
		if k, err = s.d.newKernel(kl.k); err != nil {
			return err
		}
		s.kernels[kl.k] = k
	}
	if err := s.d.setArgs(k, kl); err != nil {
		return err
	}
	global, local := s.d.global(kl.n), s.d.sh.local
	return check("clEnqueueNDRangeKernel("+kernelNames[kl.k]+")",
		callErr(s.d.l.enqueueNDRangeKernel, s.q, k, 1, 0, uintptr(unsafe.Pointer(&global)), uintptr(unsafe.Pointer(&local)), 0, 0, 0))
}

// invalidate fails the running capture.
func (s *stream) invalidate(what string) error {
	return s.cap.Invalidate(fmt.Errorf("opencl: stream %d: %s while capturing: %w", s.id, what, accel.ErrCaptureInvalidated))
}

func (s *stream) Launch(c *accel.Call) error {
	if err := c.ValidateFor(s.d.capab); err != nil {
		return err
	}
	for i := 0; i < c.Operands(); i++ {
		if _, ok := s.d.memOf(c.T[i].Buf); !ok {
			return fmt.Errorf("opencl: %s: operand %d is not memory of this device: %w", c.Op, i, accel.ErrInvalidArgument)
		}
	}
	kl, err := s.d.prepare(c)
	if err != nil {
		return err
	}
	if s.cap != nil {
		s.cap.Nodes = append(s.cap.Nodes, node{kind: nodeKernel, call: *c})
		return nil
	}
	return s.enqueue(kl)
}

func (s *stream) Copy(dst, src accel.Buffer) error {
	dm, ok1 := s.d.memOf(dst)
	sm, ok2 := s.d.memOf(src)
	if dst.Len() != src.Len() || !ok1 || !ok2 || dst.Overlaps(src) {
		return fmt.Errorf("opencl: copy %v <- %v: %w", dst, src, accel.ErrInvalidArgument)
	}
	if s.cap != nil {
		s.cap.Nodes = append(s.cap.Nodes, node{kind: nodeCopy, dst: dst, src: src})
		return nil
	}
	if dst.Len() == 0 {
		return nil
	}
	return s.enqueueCopy(sm.h, src.Offset(), dm.h, dst.Offset(), dst.Len())
}

func (s *stream) enqueueCopy(src uintptr, soff int64, dst uintptr, doff int64, n int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedErr()
	}
	return check("clEnqueueCopyBuffer", callErr(s.d.l.enqueueCopyBuffer, s.q, src, dst, uintptr(soff), uintptr(doff), uintptr(n), 0, 0, 0))
}

// CopyHtoD is a device copy from the pinned buffer's cl_mem, the same
// command eager and in a graph.
func (s *stream) CopyHtoD(dst accel.Buffer, src accel.HostBuffer) error {
	dm, ok := s.d.memOf(dst)
	hm, okh := s.d.hostOf(src)
	if dst.Len() != src.Len() || !ok || src.IsNil() || !okh {
		return fmt.Errorf("opencl: copy %v <- host(%d bytes): %w", dst, src.Len(), accel.ErrInvalidArgument)
	}
	if s.cap != nil {
		s.cap.Nodes = append(s.cap.Nodes, node{kind: nodeCopy, dst: dst, hsrc: src})
		return nil
	}
	if dst.Len() == 0 {
		return nil
	}
	return s.enqueueCopy(hm.h, src.Offset(), dm.h, dst.Offset(), dst.Len())
}

// CopyDtoH reads into the pinned buffer's mapped bytes (memory OpenCL owns,
// never a Go slice).
func (s *stream) CopyDtoH(dst accel.HostBuffer, src accel.Buffer) error {
	if s.cap != nil {
		return s.invalidate("copy to the host")
	}
	sm, ok := s.d.memOf(src)
	hm, okh := s.d.hostOf(dst)
	if dst.Len() != src.Len() || !ok || dst.IsNil() || !okh {
		return fmt.Errorf("opencl: copy host(%d bytes) <- %v: %w", dst.Len(), src, accel.ErrInvalidArgument)
	}
	if src.Len() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedErr()
	}
	return check("clEnqueueReadBuffer", callErr(s.d.l.enqueueReadBuffer, s.q, sm.h, 0, uintptr(src.Offset()), uintptr(src.Len()),
		hm.ptr+uintptr(dst.Offset()), 0, 0, 0))
}

func (s *stream) Record(e accel.Event) error {
	ev, ok := e.(*event)
	if !ok || ev.d != s.d {
		return fmt.Errorf("opencl: record: not an event of this device: %w", accel.ErrInvalidArgument)
	}
	if s.cap != nil {
		return s.invalidate("event record")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedErr()
	}
	var h uintptr
	if err := check("clEnqueueMarkerWithWaitList", callErr(s.d.l.enqueueMarkerWithWaitList, s.q, 0, 0, uintptr(unsafe.Pointer(&h)))); err != nil {
		return err
	}
	// Submit now, so the event completes without anyone waiting on this
	// stream, and another queue may wait for it.
	if err := check("clFlush", callErr(s.d.l.flush, s.q)); err != nil {
		call(s.d.l.releaseEvent, h)
		return err
	}
	ev.set(s, h)
	return nil
}

func (s *stream) Wait(e accel.Event) error {
	ev, ok := e.(*event)
	if !ok || ev.d != s.d {
		return fmt.Errorf("opencl: wait: not an event of this device: %w", accel.ErrInvalidArgument)
	}
	if s.cap != nil {
		return s.invalidate("wait on an event")
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if ev.h == 0 || ev.s == s {
		return nil // never recorded, or already ordered by this queue
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedErr()
	}
	h := ev.h
	return check("clEnqueueBarrierWithWaitList", callErr(s.d.l.enqueueBarrierWithWaitList, s.q, 1, uintptr(unsafe.Pointer(&h)), 0))
}

func (s *stream) Synchronize() error {
	if s.cap != nil {
		return s.invalidate("synchronize")
	}
	return s.finish()
}

func (s *stream) finish() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	return check("clFinish", callErr(s.d.l.finish, s.q))
}

func (s *stream) Alloc(n int64) (accel.Buffer, error) {
	if err := s.d.check(); err != nil {
		return accel.Buffer{}, err
	}
	return s.d.Caching().Alloc(s.id, n)
}

// Free returns a block in stream order: the allocator reuses it at once for
// this stream's later allocations, which the in-order queue runs after
// everything enqueued so far.
func (s *stream) Free(b accel.Buffer) error { return s.d.Caching().Free(b) }

func (s *stream) BeginCapture(p accel.Pool) error {
	if !s.d.capab.GraphCapture {
		return fmt.Errorf("opencl: %s does not offer cl_khr_command_buffer: %w", s.d.info.Name, accel.ErrUnsupported)
	}
	return alloc.BeginOn(&s.cap, s.d.Caching(), "opencl", s.id, p)
}

func (s *stream) EndCapture() (accel.Graph, error) {
	c, mem, err := alloc.EndOn(&s.cap, "opencl", s.id)
	if err != nil {
		return nil, err
	}
	return &graph{d: s.d, pool: c.Pool, nodes: c.Nodes, mem: mem}, nil
}

func (s *stream) AbortCapture() { alloc.AbortOn(&s.cap) }

func (s *stream) Capturing() bool { return s.cap != nil }

// Close waits for the stream's work and releases its queue and kernels.
func (s *stream) Close() error {
	s.AbortCapture()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	err := check("clFinish", callErr(s.d.l.finish, s.q))
	s.closed = true
	for i, k := range s.kernels {
		if k != 0 {
			call(s.d.l.releaseKernel, k)
			s.kernels[i] = 0
		}
	}
	call(s.d.l.releaseCommandQueue, s.q)
	s.mu.Unlock()
	s.d.mu.Lock()
	delete(s.d.streams, s)
	s.d.mu.Unlock()
	return err
}

// event is the marker last recorded on a stream.
type event struct {
	d  *Device
	mu sync.Mutex
	s  *stream
	h  uintptr // cl_event, 0 if never recorded
}

func (e *event) set(s *stream, h uintptr) {
	e.mu.Lock()
	old := e.h
	e.s, e.h = s, h
	e.mu.Unlock()
	if old != 0 {
		call(e.d.l.releaseEvent, old)
	}
}

// Query reports whether the recorded marker has run (or failed).
func (e *event) Query() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h == 0 {
		return true
	}
	var st int32
	if callErr(e.d.l.getEventInfo, e.h, clEventExecutionStatus, 4, uintptr(unsafe.Pointer(&st)), 0) != clSuccess {
		return true
	}
	return st <= clComplete
}

func (e *event) Synchronize() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h == 0 {
		return nil
	}
	h := e.h
	return check("clWaitForEvents", callErr(e.d.l.waitForEvents, 1, uintptr(unsafe.Pointer(&h))))
}
