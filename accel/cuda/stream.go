//go:build linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/alloc"
)

// argBlock is where a stream lays out a launch's arguments for the driver:
// kernelParams is ptrs, each pointing at its value. It lives as long as the
// stream (the Go heap does not move objects, so the addresses in ptrs stay
// valid; no runtime.Pinner, which panics if collected while pinning), and is
// used under the stream's mutex.
type argBlock struct {
	vals  [maxKernelArgs]uint64
	rope  [ropeTable]float32
	ptrs  [maxKernelArgs]uintptr
	alpha float32
	beta  float32
}

// stream is a CUstream created non-blocking (it never synchronises with the
// legacy default stream), with its own cuBLAS handle and workspace.
type stream struct {
	d  *Device
	id int64
	h  uintptr

	mu     sync.Mutex // serialises the argument block, cuBLAS and Close
	closed bool
	ab     *argBlock
	blasState

	// capture state; touched only by the goroutine that captures
	cap *alloc.Capture[node]
	// capturing mirrors cap != nil for other goroutines (Synchronize).
	capturing atomic.Bool
}

// blasState is a stream's cuBLAS handle and the workspace bound to it.
type blasState struct {
	blas uintptr // cublasHandle_t; 0: no cuBLAS on this stream
	ws   uint64  // its workspace
}

// release destroys the handle and frees the workspace (in the device's
// context, on the calling thread: the caller has entered it).
func (b blasState) release(d *Device) {
	if b.blas != 0 {
		call32(d.blas.cublasDestroy, b.blas)
	}
	if b.ws != 0 {
		call32(d.drv.cuMemFree, uintptr(b.ws))
	}
}

// NewStream creates a stream and, where cuBLAS is loaded, its handle bound to
// the stream with a workspace of its own.
func (d *Device) NewStream() (accel.Stream, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	s := &stream{d: d, ab: new(argBlock)}
	for i := range s.ab.ptrs {
		s.ab.ptrs[i] = uintptr(unsafe.Pointer(&s.ab.vals[i]))
	}
	d.enter()
	err := d.drv.err("cuStreamCreate", call32(d.drv.cuStreamCreate, uintptr(unsafe.Pointer(&s.h)), cuStreamNonBlocking))
	if err == nil && d.blas != nil {
		if berr := s.initBLAS(); berr != nil {
			d.mu.Lock()
			d.blasNote = "cuBLAS unusable, reprise's matmul kernel for every MatMul (" + firstLine(berr.Error()) + ")"
			d.mu.Unlock()
		}
	}
	d.leave()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		s.Close()
		return nil, fmt.Errorf("cuda: device: %w", accel.ErrClosed)
	}
	d.nextID++
	s.id = d.nextID
	d.streams[s] = struct{}{}
	d.mu.Unlock()
	return s, nil
}

// initBLAS makes the stream's cuBLAS handle: bound to the stream, then given
// its own workspace (cublasSetStream resets the workspace, so the order
// matters), default math (no TF32). The context is current.
func (s *stream) initBLAS() error {
	b, drv := s.d.blas, s.d.drv
	var h uintptr
	if err := b.err("cublasCreate_v2", call32(b.cublasCreate, uintptr(unsafe.Pointer(&h)))); err != nil {
		return err
	}
	fail := func(err error) error {
		call32(b.cublasDestroy, h)
		if s.ws != 0 {
			call32(drv.cuMemFree, uintptr(s.ws))
			s.ws = 0
		}
		return err
	}
	if err := b.err("cublasSetStream_v2", call32(b.cublasSetStream, h, s.h)); err != nil {
		return fail(err)
	}
	if b.cublasSetWorkspace == 0 {
		return fail(fmt.Errorf("cuda: %s has no cublasSetWorkspace_v2 (cuBLAS 11.4 or later is needed to capture it)", b.path))
	}
	if err := drv.err("cuMemAlloc_v2(cuBLAS workspace)", call32(drv.cuMemAlloc, uintptr(unsafe.Pointer(&s.ws)), cublasWorkspaceBytes)); err != nil {
		return fail(err)
	}
	if err := b.err("cublasSetWorkspace_v2", call32(b.cublasSetWorkspace, h, uintptr(s.ws), cublasWorkspaceBytes)); err != nil {
		return fail(err)
	}
	if err := b.err("cublasSetMathMode", call32(b.cublasSetMathMode, h, cublasDefaultMath)); err != nil {
		return fail(err)
	}
	s.blas = h
	return nil
}

func (s *stream) Device() accel.Device { return s.d }

func (s *stream) closedErr() error {
	return fmt.Errorf("cuda: stream %d: %w", s.id, accel.ErrClosed)
}

// invalidate fails the running capture (before anything reaches the driver).
func (s *stream) invalidate(what string) error {
	return s.cap.Invalidate(fmt.Errorf("cuda: stream %d: %s while capturing: %w", s.id, what, accel.ErrCaptureInvalidated))
}

// result turns a driver status into an error, remembering a capture the
// driver invalidated.
func (s *stream) result(fn string, code int32) error {
	err := s.d.drv.err(fn, code)
	if err != nil && s.cap != nil && errors.Is(err, accel.ErrCaptureInvalidated) {
		s.cap.Invalidate(err)
	}
	return err
}

// Launch validates the call, resolves it and enqueues its kernel (recorded
// by the driver while the stream captures).
func (s *stream) Launch(c *accel.Call) error {
	if err := c.ValidateFor(s.d.capab); err != nil {
		return err
	}
	kl, err := prepare(c, s.d.resolve, s.blas != 0)
	if err != nil {
		return err
	}
	if s.cap != nil {
		s.cap.Nodes = append(s.cap.Nodes, node{kind: nodeKernel, call: *c})
	}
	return s.issue(kl)
}

// issue enqueues a prepared launch.
func (s *stream) issue(kl *klaunch) error {
	if kl.noWork {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedErr()
	}
	d := s.d
	d.enter()
	defer d.leave()
	if g := kl.gemm; g != nil {
		b := d.blas
		s.ab.alpha, s.ab.beta = 1, 0
		code := call32(b.cublasSgemm, s.blas, uintptr(g.transa), uintptr(g.transb), uintptr(g.m), uintptr(g.n), uintptr(g.k),
			uintptr(unsafe.Pointer(&s.ab.alpha)), uintptr(g.a), uintptr(g.lda), uintptr(g.b), uintptr(g.ldb),
			uintptr(unsafe.Pointer(&s.ab.beta)), uintptr(g.c), uintptr(g.ldc))
		if err := b.err("cublasSgemm_v2", code); err != nil {
			if s.cap != nil {
				s.cap.Invalidate(err)
			}
			return fmt.Errorf("%w (m=%d n=%d k=%d)", err, g.m, g.n, g.k)
		}
		return nil
	}
	for i := 0; i < kl.nargs; i++ {
		a := kl.args[i]
		if a.kind == aRope {
			if kl.rope == nil {
				return fmt.Errorf("cuda: internal error: %s has a RopeFreqs argument and no table", kl.name())
			}
			s.ab.rope = *kl.rope
			s.ab.ptrs[i] = uintptr(unsafe.Pointer(&s.ab.rope[0]))
			continue
		}
		s.ab.vals[i] = a.v
		s.ab.ptrs[i] = uintptr(unsafe.Pointer(&s.ab.vals[i]))
	}
	code := call32(d.drv.cuLaunchKernel, d.funcs[kl.k], uintptr(kl.grid), 1, 1, uintptr(kl.block), 1, 1, 0, s.h,
		uintptr(unsafe.Pointer(&s.ab.ptrs[0])), 0)
	if code != cuSuccess {
		return fmt.Errorf("%w (grid %d, block %d)", s.result("cuLaunchKernel("+kl.name()+")", code), kl.grid, kl.block)
	}
	return nil
}

// Copy enqueues a device-to-device copy. The views must not partly overlap;
// a copy of a view onto itself does nothing.
func (s *stream) Copy(dst, src accel.Buffer) error {
	if dst.Len() != src.Len() || (dst.Overlaps(src) && dst != src) {
		return fmt.Errorf("cuda: copy %v <- %v: %w", dst, src, accel.ErrInvalidArgument)
	}
	dp, err := s.d.resolve(dst, 1)
	if err != nil {
		return err
	}
	sp, err := s.d.resolve(src, 1)
	if err != nil {
		return err
	}
	if s.cap != nil {
		s.cap.Nodes = append(s.cap.Nodes, node{kind: nodeCopy, dst: dst, src: src})
	}
	return s.copyDtoD(dp, sp, dst.Len())
}

func (s *stream) copyDtoD(dp, sp uint64, n int64) error {
	if n == 0 || dp == sp {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedErr()
	}
	s.d.enter()
	defer s.d.leave()
	return s.result("cuMemcpyDtoDAsync_v2", call32(s.d.drv.cuMemcpyDtoDAsync, uintptr(dp), uintptr(sp), uintptr(n), s.h))
}

// CopyHtoD enqueues a copy from pinned host memory; captured, it reads the
// host bytes at each replay.
func (s *stream) CopyHtoD(dst accel.Buffer, src accel.HostBuffer) error {
	hm, ok := s.d.hostOf(src)
	if dst.Len() != src.Len() || src.IsNil() || !ok {
		return fmt.Errorf("cuda: copy %v <- host(%d bytes) (pinned memory of this device): %w", dst, src.Len(), accel.ErrInvalidArgument)
	}
	dp, err := s.d.resolve(dst, 1)
	if err != nil {
		return err
	}
	if s.cap != nil {
		s.cap.Nodes = append(s.cap.Nodes, node{kind: nodeUpload, dst: dst, hsrc: src})
	}
	return s.copyHtoD(dp, hm.ptr+uintptr(src.Offset()), dst.Len())
}

func (s *stream) copyHtoD(dp uint64, hp uintptr, n int64) error {
	if n == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedErr()
	}
	s.d.enter()
	defer s.d.leave()
	return s.result("cuMemcpyHtoDAsync_v2", call32(s.d.drv.cuMemcpyHtoDAsync, uintptr(dp), hp, uintptr(n), s.h))
}

// CopyDtoH enqueues a copy into pinned host memory. It invalidates a capture.
func (s *stream) CopyDtoH(dst accel.HostBuffer, src accel.Buffer) error {
	if s.cap != nil {
		return s.invalidate("copy to the host")
	}
	hm, ok := s.d.hostOf(dst)
	if dst.Len() != src.Len() || dst.IsNil() || !ok {
		return fmt.Errorf("cuda: copy host(%d bytes) <- %v (pinned memory of this device): %w", dst.Len(), src, accel.ErrInvalidArgument)
	}
	sp, err := s.d.resolve(src, 1)
	if err != nil {
		return err
	}
	if src.Len() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedErr()
	}
	s.d.enter()
	defer s.d.leave()
	return s.result("cuMemcpyDtoHAsync_v2", call32(s.d.drv.cuMemcpyDtoHAsync, hm.ptr+uintptr(dst.Offset()), uintptr(sp), uintptr(src.Len()), s.h))
}

func (s *stream) eventOf(e accel.Event, what string) (*event, error) {
	ev, ok := e.(*event)
	if !ok || ev.d != s.d {
		return nil, fmt.Errorf("cuda: %s: not an event of this device: %w", what, accel.ErrInvalidArgument)
	}
	return ev, nil
}

// Record records e after the work enqueued so far. It invalidates a capture.
func (s *stream) Record(e accel.Event) error {
	ev, err := s.eventOf(e, "record")
	if err != nil {
		return err
	}
	if s.cap != nil {
		return s.invalidate("event record")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedErr()
	}
	s.d.enter()
	defer s.d.leave()
	err = s.result("cuEventRecord", call32(s.d.drv.cuEventRecord, ev.eh.h, s.h))
	runtime.KeepAlive(ev)
	return err
}

// Wait makes later work wait for e. It invalidates a capture.
func (s *stream) Wait(e accel.Event) error {
	ev, err := s.eventOf(e, "wait")
	if err != nil {
		return err
	}
	if s.cap != nil {
		return s.invalidate("wait on an event")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedErr()
	}
	s.d.enter()
	defer s.d.leave()
	err = s.result("cuStreamWaitEvent", call32(s.d.drv.cuStreamWaitEvent, s.h, ev.eh.h, 0))
	runtime.KeepAlive(ev)
	return err
}

// Synchronize waits for the stream's work. It invalidates a capture.
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
	s.d.enter()
	defer s.d.leave()
	return s.result("cuStreamSynchronize", call32(s.d.drv.cuStreamSynchronize, s.h))
}

func (s *stream) Alloc(n int64) (accel.Buffer, error) {
	if err := s.d.check(); err != nil {
		return accel.Buffer{}, err
	}
	return s.d.Caching().Alloc(s.id, n)
}

// Free returns a block in stream order: the allocator reuses it at once for
// this stream's later allocations, which the stream runs after everything
// enqueued so far.
func (s *stream) Free(b accel.Buffer) error { return s.d.Caching().Free(b) }

// BeginCapture starts a CU_STREAM_CAPTURE_MODE_THREAD_LOCAL capture. The
// calling goroutine stays locked to its OS thread until EndCapture or
// AbortCapture, which it must call itself: the driver ends a thread-local
// capture only on the thread that began it.
func (s *stream) BeginCapture(p accel.Pool) error {
	if s.cap != nil {
		return fmt.Errorf("cuda: stream %d: %w", s.id, accel.ErrAlreadyCapturing)
	}
	if err := s.d.check(); err != nil {
		return err
	}
	c, err := alloc.StartCapture[node](s.d.Caching(), s.id, p)
	if err != nil {
		return fmt.Errorf("cuda: stream %d: %w", s.id, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Abort()
		return s.closedErr()
	}
	s.d.enter() // stays locked while capturing; the leave is in endDriverCapture
	// Counted before the driver starts, so that no free on another
	// goroutine slips in between (frees are deferred while any capture is
	// live).
	s.d.captureStarted()
	err = s.d.drv.err("cuStreamBeginCapture_v2", call32(s.d.drv.cuStreamBeginCapture, s.h, cuCaptureModeThreadLoc))
	s.mu.Unlock()
	if err != nil {
		s.d.captureEnded()
		s.d.leave()
		c.Abort()
		return err
	}
	s.cap = c
	s.capturing.Store(true)
	return nil
}

// endDriverCapture ends the driver's capture and unlocks the thread that
// BeginCapture locked. It returns the graph (0 when the capture was
// invalidated) and the driver's status.
func (s *stream) endDriverCapture() (uintptr, error) {
	var g uintptr
	s.mu.Lock()
	s.d.enter()
	err := s.d.drv.err("cuStreamEndCapture", call32(s.d.drv.cuStreamEndCapture, s.h, uintptr(unsafe.Pointer(&g))))
	s.d.leave()
	s.mu.Unlock()
	s.d.leave() // BeginCapture's
	s.cap = nil
	s.capturing.Store(false)
	s.d.captureEnded()
	return g, err
}

func (s *stream) destroyGraph(g uintptr) {
	if g == 0 {
		return
	}
	s.d.enter()
	call32(s.d.drv.cuGraphDestroy, g)
	s.d.leave()
}

// EndCapture ends the capture and returns the graph, or the reason the
// capture is invalid; the stream leaves capture mode either way.
func (s *stream) EndCapture() (accel.Graph, error) {
	c := s.cap
	if c == nil {
		return nil, fmt.Errorf("cuda: stream %d: %w", s.id, accel.ErrNotCapturing)
	}
	g, derr := s.endDriverCapture()
	// A reason recorded during the capture comes first.
	switch {
	case derr != nil:
		c.Invalidate(fmt.Errorf("cuda: stream %d: ending the capture: %w", s.id, derr))
	case g == 0:
		c.Invalidate(fmt.Errorf("cuda: stream %d: the driver returned no graph: %w", s.id, accel.ErrCaptureInvalidated))
	}
	mem, err := c.End()
	if err != nil {
		s.destroyGraph(g)
		return nil, err
	}
	gr := &graph{d: s.d, h: g, pool: c.Pool, nodes: c.Nodes, mem: mem}
	s.d.mu.Lock()
	s.d.graphs[gr] = struct{}{}
	s.d.mu.Unlock()
	return gr, nil
}

// AbortCapture ends the capture, destroys what the driver recorded and
// returns the blocks the capture allocated to its pool.
func (s *stream) AbortCapture() {
	c := s.cap
	if c == nil {
		return
	}
	g, _ := s.endDriverCapture()
	s.destroyGraph(g)
	c.Abort()
}

func (s *stream) Capturing() bool { return s.capturing.Load() }

// Close waits for the stream's work and releases it; its cuBLAS handle and
// workspace stay with the device until it closes (see Device.blasKept).
func (s *stream) Close() error {
	s.AbortCapture()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	d := s.d
	d.enter()
	err := d.drv.err("cuStreamSynchronize", call32(d.drv.cuStreamSynchronize, s.h))
	call32(d.drv.cuStreamDestroy, s.h)
	d.leave()
	kept := s.blasState
	s.blasState = blasState{}
	s.mu.Unlock()
	d.mu.Lock()
	if kept != (blasState{}) {
		d.blasKept = append(d.blasKept, kept)
	}
	delete(d.streams, s)
	d.mu.Unlock()
	return err
}
