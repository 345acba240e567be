package cpu

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/alloc"
)

type taskKind uint8

const (
	taskKernel taskKind = iota + 1
	taskCopy
	taskWait
	taskReplay
)

// task is one unit of a stream's queue.
type task struct {
	kind taskKind
	call rcall
	dst  []byte // taskCopy
	src  []byte
	dm   *mem // segment of dst when it is device memory (taskCopy)
	doff int64
	ev   *stream // taskWait: wait until ev's done count reaches seq
	seq  uint64
	exec *nodes // taskReplay
}

type stream struct {
	d  *Device
	id int64

	mu      sync.Mutex
	more    *sync.Cond // queue became non-empty, or closing
	q       []task
	spare   []task
	enq     uint64 // tasks enqueued
	closing bool
	stopped chan struct{}

	done     atomic.Uint64 // tasks completed
	waiters  atomic.Int32
	progress *sync.Cond // done advanced (on mu)

	asyncErr atomic.Pointer[error]

	k *kctx // the stream goroutine's kernel scratch

	// capture state; touched only by the host goroutine that owns the stream
	cap *alloc.Capture[node]
}

// NewStream starts a stream goroutine.
func (d *Device) NewStream() (accel.Stream, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.nextID++
	s := &stream{d: d, id: d.nextID, stopped: make(chan struct{}), k: &kctx{d: d}}
	d.streams[s] = struct{}{}
	d.mu.Unlock()
	s.more = sync.NewCond(&s.mu)
	s.progress = sync.NewCond(&s.mu)
	go s.loop()
	return s, nil
}

func (s *stream) Device() accel.Device { return s.d }

func (s *stream) loop() {
	defer close(s.stopped)
	for {
		s.mu.Lock()
		for len(s.q) == 0 && !s.closing {
			s.more.Wait()
		}
		if len(s.q) == 0 && s.closing {
			s.mu.Unlock()
			return
		}
		batch := s.q
		s.q, s.spare = s.spare[:0], nil
		s.mu.Unlock()
		for i := range batch {
			s.run(&batch[i])
			batch[i] = task{} // drop references for the collector
			s.done.Add(1)
			if s.waiters.Load() > 0 {
				s.mu.Lock()
				s.progress.Broadcast()
				s.mu.Unlock()
			}
		}
		s.mu.Lock()
		if s.spare == nil {
			s.spare = batch[:0]
		}
		s.mu.Unlock()
	}
}

// run executes one task. A panic in a kernel is a device fault: it becomes the
// stream's sticky error, as a GPU's asynchronous errors do, and the queue goes
// on so that nobody waiting on it hangs.
func (s *stream) run(t *task) {
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("cpu: stream %d: kernel fault: %v\n%s", s.id, r, debug.Stack())
			s.asyncErr.CompareAndSwap(nil, &err)
		}
	}()
	switch t.kind {
	case taskKernel:
		s.d.exec(&t.call, s.k)
	case taskCopy:
		s.d.packs.written(t.dm, t.doff, int64(len(t.dst)))
		copy(t.dst, t.src)
	case taskWait:
		t.ev.waitDone(t.seq)
	case taskReplay:
		s.d.replay(t.exec, s.k)
	}
}

func (s *stream) enqueue(t task) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return fmt.Errorf("cpu: stream %d: %w", s.id, accel.ErrClosed)
	}
	s.q = append(s.q, t)
	s.enq++
	s.more.Signal()
	s.mu.Unlock()
	return nil
}

// waitDone blocks until seq tasks of s have completed.
func (s *stream) waitDone(seq uint64) {
	if s.done.Load() >= seq {
		return
	}
	s.waiters.Add(1)
	s.mu.Lock()
	for s.done.Load() < seq {
		s.progress.Wait()
	}
	s.mu.Unlock()
	s.waiters.Add(-1)
}

func (s *stream) err() error {
	if p := s.asyncErr.Load(); p != nil {
		return *p
	}
	return nil
}

// invalidate fails the running capture.
func (s *stream) invalidate(what string) error {
	return s.cap.Invalidate(fmt.Errorf("cpu: stream %d: %s while capturing: %w", s.id, what, accel.ErrCaptureInvalidated))
}

func (s *stream) Launch(c *accel.Call) error {
	if err := c.Validate(); err != nil {
		return err
	}
	for i := 0; i < c.Operands(); i++ {
		if !ownBuffer(c.T[i].Buf) {
			return fmt.Errorf("cpu: %s: operand %d is not CPU device memory: %w", c.Op, i, accel.ErrInvalidArgument)
		}
	}
	for _, i := range c.Writes() {
		// Checked before the message is made: this runs at every launch.
		if readOnly(c.T[i].Buf) {
			return readOnlyErr(fmt.Sprintf("%s (operand %d)", c.Op, i), c.T[i].Buf)
		}
	}
	if s.cap != nil {
		s.cap.Nodes = append(s.cap.Nodes, node{kind: taskKernel, call: *c})
		return nil
	}
	return s.enqueue(task{kind: taskKernel, call: resolveCall(c)})
}

func (s *stream) Copy(dst, src accel.Buffer) error {
	if dst.Len() != src.Len() || !ownBuffer(dst) || !ownBuffer(src) {
		return fmt.Errorf("cpu: copy %v <- %v: %w", dst, src, accel.ErrInvalidArgument)
	}
	if err := readOnlyErr("a copy", dst); err != nil {
		return err
	}
	if s.cap != nil {
		s.cap.Nodes = append(s.cap.Nodes, node{kind: taskCopy, dst: dst, src: src})
		return nil
	}
	dm, doff := memOf(dst)
	return s.enqueue(task{kind: taskCopy, dst: bytesOf(dst), src: bytesOf(src), dm: dm, doff: doff})
}

func (s *stream) CopyHtoD(dst accel.Buffer, src accel.HostBuffer) error {
	if dst.Len() != src.Len() || !ownBuffer(dst) || src.IsNil() {
		return fmt.Errorf("cpu: copy %v <- host(%d bytes): %w", dst, src.Len(), accel.ErrInvalidArgument)
	}
	if err := readOnlyErr("a host-to-device copy", dst); err != nil {
		return err
	}
	if s.cap != nil {
		s.cap.Nodes = append(s.cap.Nodes, node{kind: taskCopy, dst: dst, hsrc: src})
		return nil
	}
	dm, doff := memOf(dst)
	return s.enqueue(task{kind: taskCopy, dst: bytesOf(dst), src: src.Bytes(), dm: dm, doff: doff})
}

func (s *stream) CopyDtoH(dst accel.HostBuffer, src accel.Buffer) error {
	if s.cap != nil {
		return s.invalidate("copy to the host")
	}
	if dst.Len() != src.Len() || !ownBuffer(src) || dst.IsNil() {
		return fmt.Errorf("cpu: copy host(%d bytes) <- %v: %w", dst.Len(), src, accel.ErrInvalidArgument)
	}
	return s.enqueue(task{kind: taskCopy, dst: dst.Bytes(), src: bytesOf(src)})
}

func (s *stream) Record(e accel.Event) error {
	ev, ok := e.(*event)
	if !ok {
		return fmt.Errorf("cpu: record: not a CPU event: %w", accel.ErrInvalidArgument)
	}
	if s.cap != nil {
		return s.invalidate("event record")
	}
	s.mu.Lock()
	seq := s.enq
	s.mu.Unlock()
	ev.set(s, seq)
	return nil
}

func (s *stream) Wait(e accel.Event) error {
	ev, ok := e.(*event)
	if !ok {
		return fmt.Errorf("cpu: wait: not a CPU event: %w", accel.ErrInvalidArgument)
	}
	if s.cap != nil {
		return s.invalidate("wait on an event")
	}
	on, seq := ev.get()
	if on == nil || on == s {
		return nil // never recorded, or already ordered by this stream
	}
	return s.enqueue(task{kind: taskWait, ev: on, seq: seq})
}

func (s *stream) Synchronize() error {
	if s.cap != nil {
		return s.invalidate("synchronize")
	}
	return s.drain()
}

// drain waits for the work enqueued so far.
func (s *stream) drain() error {
	s.mu.Lock()
	seq := s.enq
	s.mu.Unlock()
	s.waitDone(seq)
	return s.err()
}

func (s *stream) Alloc(n int64) (accel.Buffer, error) {
	return s.d.Caching().Alloc(s.id, n)
}

// Free returns a block in stream order. The allocator reuses it at once for
// this stream's later allocations, which run after everything enqueued so far.
func (s *stream) Free(b accel.Buffer) error {
	if m, ok := b.Memory().(*mem); ok && m.readOnly {
		return fmt.Errorf("cpu: stream %d: free %v: a host-aliased buffer is freed with Device.Free: %w", s.id, b, accel.ErrInvalidArgument)
	}
	return s.d.Caching().Free(b)
}

func (s *stream) BeginCapture(p accel.Pool) error {
	return alloc.BeginOn(&s.cap, s.d.Caching(), "cpu", s.id, p)
}

func (s *stream) EndCapture() (accel.Graph, error) {
	c, mem, err := alloc.EndOn(&s.cap, "cpu", s.id)
	if err != nil {
		return nil, err
	}
	return &graph{d: s.d, pool: c.Pool, nodes: c.Nodes, mem: mem}, nil
}

func (s *stream) AbortCapture() { alloc.AbortOn(&s.cap) }

func (s *stream) Capturing() bool { return s.cap != nil }

func (s *stream) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		<-s.stopped
		return nil
	}
	s.closing = true
	s.more.Broadcast()
	s.mu.Unlock()
	<-s.stopped
	s.d.mu.Lock()
	delete(s.d.streams, s)
	s.d.mu.Unlock()
	return s.err()
}

// event remembers the stream and position it was last recorded at.
type event struct {
	mu  sync.Mutex
	s   *stream
	seq uint64
}

func (e *event) set(s *stream, seq uint64) {
	e.mu.Lock()
	e.s, e.seq = s, seq
	e.mu.Unlock()
}

func (e *event) get() (*stream, uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.s, e.seq
}

func (e *event) Query() bool {
	s, seq := e.get()
	return s == nil || s.done.Load() >= seq
}

func (e *event) Synchronize() error {
	s, seq := e.get()
	if s == nil {
		return nil
	}
	s.waitDone(seq)
	return s.err()
}
