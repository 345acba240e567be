//go:build (linux || darwin) && (amd64 || arm64 || riscv64 || loong64)

package opencl

import (
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/alloc"
)

type nodeKind uint8

const (
	nodeKernel nodeKind = iota + 1
	nodeCopy            // device to device, or from pinned host memory
	nodeExec            // a child executable launched during capture
)

// node is one recorded operation, with its operands as buffers; Instantiate
// resolves them to OpenCL arguments.
type node struct {
	kind  nodeKind
	call  accel.Call
	dst   accel.Buffer
	src   accel.Buffer
	hsrc  accel.HostBuffer
	child *exec
}

type graph struct {
	d     *Device
	pool  *alloc.Pool
	nodes []node
	mem   accel.GraphMemory
	once  sync.Once
}

func (g *graph) Nodes() int                { return len(g.nodes) }
func (g *graph) Memory() accel.GraphMemory { return g.mem }

func (g *graph) Destroy() {
	g.once.Do(func() { g.d.Caching().GraphDestroyed(g.pool) })
}

// launches resolves nodes to kernel launches, a child executable's inlined.
func (d *Device) launches(ns []node, out []*klaunch) ([]*klaunch, error) {
	for i := range ns {
		n := &ns[i]
		switch n.kind {
		case nodeKernel:
			kl, err := d.prepare(&n.call)
			if err != nil {
				return nil, err
			}
			out = append(out, kl)
		case nodeCopy:
			if n.dst.Len() == 0 {
				continue
			}
			dm, ok := d.memOf(n.dst)
			if !ok {
				return nil, fmt.Errorf("opencl: copy into %v, not memory of this device: %w", n.dst, accel.ErrInvalidArgument)
			}
			var src uintptr
			var soff int64
			if !n.hsrc.IsNil() {
				hm, ok := d.hostOf(n.hsrc)
				if !ok {
					return nil, fmt.Errorf("opencl: copy from host memory of another device: %w", accel.ErrInvalidArgument)
				}
				src, soff = hm.h, n.hsrc.Offset()
			} else {
				sm, ok := d.memOf(n.src)
				if !ok {
					return nil, fmt.Errorf("opencl: copy from %v, not memory of this device: %w", n.src, accel.ErrInvalidArgument)
				}
				src, soff = sm.h, n.src.Offset()
			}
			out = append(out, copyLaunch(dm.h, n.dst.Offset(), src, soff, n.dst.Len()))
		case nodeExec:
			n.child.mu.RLock()
			r := n.child.cur
			n.child.mu.RUnlock()
			if r == nil {
				return nil, fmt.Errorf("opencl: a destroyed executable was launched during capture: %w", accel.ErrInvalidArgument)
			}
			out = append(out, r.launches...)
		}
	}
	return out, nil
}

// recording is one cl_khr_command_buffer and what it holds: a kernel object
// per command (PoCL reads arguments at replay, so no two commands share one)
// and a reference on every cl_mem its commands use.
type recording struct {
	cb       uintptr
	kernels  []uintptr
	mems     []uintptr
	launches []*klaunch // for inlining into a parent graph

	lastMu sync.Mutex
	last   uintptr // the latest replay's event
}

func (d *Device) release(r *recording) {
	if r.last != 0 {
		call(d.l.releaseEvent, r.last)
	}
	if r.cb != 0 {
		call(d.cb.release, r.cb)
	}
	for _, k := range r.kernels {
		call(d.l.releaseKernel, k)
	}
	for _, m := range r.mems {
		call(d.l.releaseMemObject, m)
	}
}

// createCommandBuffer makes a command buffer on the aux queue, for use by
// several replays at once where the extension revision has the flag.
func (d *Device) createCommandBuffer() (uintptr, error) {
	var code int32
	if !d.noSimultaneous.Load() {
		props := []uint64{clCommandBufferFlagsKHR, clCommandBufferSimultaneousUseKHR, 0}
		q := d.aux
		cb := call(d.cb.create, 1, uintptr(unsafe.Pointer(&q)), uintptr(unsafe.Pointer(&props[0])), uintptr(unsafe.Pointer(&code)))
		if code == clSuccess {
			return cb, nil
		}
		if code != clInvalidValue && code != clInvalidProperty {
			return 0, check("clCreateCommandBufferKHR", code)
		}
		d.noSimultaneous.Store(true)
	}
	q := d.aux
	cb := call(d.cb.create, 1, uintptr(unsafe.Pointer(&q)), 0, uintptr(unsafe.Pointer(&code)))
	if err := check("clCreateCommandBufferKHR", code); err != nil {
		return 0, err
	}
	return cb, nil
}

// record builds and finalizes a command buffer of ns, each command waiting on
// the one before (the stream's order).
func (d *Device) record(ns []node) (r *recording, err error) {
	ls, err := d.launches(ns, nil)
	if err != nil {
		return nil, err
	}
	r = &recording{launches: ls}
	defer func() {
		if err != nil {
			d.release(r)
			r = nil
		}
	}()
	seen := map[uintptr]bool{}
	for _, kl := range ls {
		for i := 0; i < kl.nargs; i++ {
			if h := uintptr(kl.args[i].val); kl.args[i].mem && !seen[h] {
				seen[h] = true
				if err := check("clRetainMemObject", callErr(d.l.retainMemObject, h)); err != nil {
					return r, err
				}
				r.mems = append(r.mems, h)
			}
		}
	}
	empty := true
	for _, kl := range ls {
		empty = empty && kl.n == 0
	}
	if empty {
		return r, nil // nothing to replay: Launch enqueues nothing
	}
	if r.cb, err = d.createCommandBuffer(); err != nil {
		return r, err
	}
	var prev, sp uint32
	have := false
	local := d.sh.local
	for _, kl := range ls {
		if kl.n == 0 {
			continue
		}
		k, err := d.newKernel(kl.k)
		if err != nil {
			return r, err
		}
		r.kernels = append(r.kernels, k)
		if err := d.setArgs(k, kl); err != nil {
			return r, err
		}
		global := d.global(kl.n)
		// The wait list must be NULL when empty (PoCL 3.1 crashes on the
		// error path otherwise).
		var code int32
		if have {
			code = callErr(d.cb.ndrange, r.cb, 0, 0, k, 1, 0, uintptr(unsafe.Pointer(&global)), uintptr(unsafe.Pointer(&local)),
				1, uintptr(unsafe.Pointer(&prev)), uintptr(unsafe.Pointer(&sp)), 0)
		} else {
			code = callErr(d.cb.ndrange, r.cb, 0, 0, k, 1, 0, uintptr(unsafe.Pointer(&global)), uintptr(unsafe.Pointer(&local)),
				0, 0, uintptr(unsafe.Pointer(&sp)), 0)
		}
		if err := check("clCommandNDRangeKernelKHR("+kernelNames[kl.k]+")", code); err != nil {
			return r, err
		}
		prev, have = sp, true
	}
	if err := check("clFinalizeCommandBufferKHR", callErr(d.cb.finalize, r.cb)); err != nil {
		return r, err
	}
	return r, nil
}

// Instantiate records the graph into a command buffer and charges its memory.
func (g *graph) Instantiate() (accel.Exec, error) {
	if err := g.d.check(); err != nil {
		return nil, err
	}
	bytes := int64(len(g.nodes)) * ExecBytesPerNode
	if err := g.d.budget.Charge(bytes); err != nil {
		return nil, fmt.Errorf("opencl: instantiate a %d-node graph: %w", len(g.nodes), err)
	}
	r, err := g.d.record(g.nodes)
	if err != nil {
		g.d.budget.Uncharge(bytes)
		return nil, fmt.Errorf("opencl: instantiate a %d-node graph: %w", len(g.nodes), err)
	}
	return &exec{d: g.d, sig: accel.Topology(g.nodes, (*node).sig), bytes: bytes, cur: r}, nil
}

// sig is what must not change for an update: the node's kind and op.
func (n *node) sig() accel.NodeSig { return accel.NodeSig{Kind: uint8(n.kind), Op: n.call.Op} }

type exec struct {
	d     *Device
	sig   []accel.NodeSig
	bytes int64

	mu  sync.RWMutex // Launch reads cur; Update and Destroy replace it
	cur *recording   // nil once destroyed
}

func (e *exec) Nodes() int    { return len(e.sig) }
func (e *exec) Memory() int64 { return e.bytes }

func (e *exec) Launch(s accel.Stream) error {
	st, ok := s.(*stream)
	if !ok || st.d != e.d {
		return fmt.Errorf("opencl: launch on a stream of another device: %w", accel.ErrInvalidArgument)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	r := e.cur
	if r == nil {
		return fmt.Errorf("opencl: launch of a destroyed executable: %w", accel.ErrInvalidArgument)
	}
	if st.cap != nil {
		st.cap.Nodes = append(st.cap.Nodes, node{kind: nodeExec, child: e})
		return nil
	}
	if r.cb == 0 || len(r.kernels) == 0 {
		return nil
	}
	return st.replay(r)
}

// enqueueCB enqueues r's command buffer (on queues, or on the queue it was
// recorded on when nq is 0) and returns its event, retained for the caller.
// Where the command buffer was made without simultaneous use, an enqueue
// while the previous replay is pending fails: wait for that replay and retry
// (PoCL marks the buffer executable again shortly after the replay's event
// completes).
func (d *Device) enqueueCB(r *recording, nq uintptr, queues *uintptr, nwait uintptr, wait *uintptr) (uintptr, int32) {
	for try := 0; ; try++ {
		var ev uintptr // PoCL dereferences the event pointer: always pass one
		code := callErr(d.cb.enqueue, nq, uintptr(unsafe.Pointer(queues)), r.cb, nwait, uintptr(unsafe.Pointer(wait)), uintptr(unsafe.Pointer(&ev)))
		if code == clSuccess {
			callErr(d.l.retainEvent, ev)
			r.lastMu.Lock()
			old := r.last
			r.last = ev
			r.lastMu.Unlock()
			if old != 0 {
				call(d.l.releaseEvent, old)
			}
			return ev, code
		}
		if code != clInvalidOperation || !d.noSimultaneous.Load() || try >= 2000 {
			return 0, code
		}
		r.lastMu.Lock()
		if last := r.last; last != 0 {
			callErr(d.l.waitForEvents, 1, uintptr(unsafe.Pointer(&last)))
		}
		r.lastMu.Unlock()
		time.Sleep(20 * time.Microsecond)
	}
}

// replay enqueues a recording's command buffer on the stream's queue.
func (s *stream) replay(r *recording) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.closedErr()
	}
	d := s.d
	if !d.noSubstitute.Load() {
		q := s.q
		ev, code := d.enqueueCB(r, 1, &q, 0, nil)
		if code == clSuccess {
			call(d.l.releaseEvent, ev)
			return nil
		}
		if code != clIncompatibleQueueKHR && code != clInvalidValue {
			return check("clEnqueueCommandBufferKHR", code)
		}
		d.noSubstitute.Store(true)
	}
	// The driver runs a command buffer only on the queue it was recorded on:
	// run it on aux after the stream's work, and make the stream wait for it.
	var before uintptr
	if err := check("clEnqueueMarkerWithWaitList", callErr(d.l.enqueueMarkerWithWaitList, s.q, 0, 0, uintptr(unsafe.Pointer(&before)))); err != nil {
		return err
	}
	defer call(d.l.releaseEvent, before)
	callErr(d.l.flush, s.q)
	after, code := d.enqueueCB(r, 0, nil, 1, &before)
	if err := check("clEnqueueCommandBufferKHR", code); err != nil {
		return err
	}
	defer call(d.l.releaseEvent, after)
	callErr(d.l.flush, d.aux)
	return check("clEnqueueBarrierWithWaitList", callErr(d.l.enqueueBarrierWithWaitList, s.q, 1, uintptr(unsafe.Pointer(&after)), 0))
}

// Update re-records the executable from g (this extension revision offers
// no mutable dispatch) and swaps the new command buffer in; replays already
// enqueued keep the old one, which OpenCL frees once they have run.
func (e *exec) Update(g accel.Graph) error {
	gg, ok := g.(*graph)
	if !ok || gg.d != e.d {
		return fmt.Errorf("opencl: update from a graph of another device: %w", accel.ErrInvalidArgument)
	}
	if err := accel.CheckTopology(accel.Topology(gg.nodes, (*node).sig), e.sig); err != nil {
		return fmt.Errorf("opencl: update: %w", err)
	}
	r, err := e.d.record(gg.nodes)
	if err != nil {
		return fmt.Errorf("opencl: update: %w", err)
	}
	e.mu.Lock()
	old := e.cur
	if old == nil {
		e.mu.Unlock()
		e.d.release(r)
		return fmt.Errorf("opencl: update of a destroyed executable: %w", accel.ErrInvalidArgument)
	}
	e.cur = r
	e.mu.Unlock()
	e.d.release(old)
	return nil
}

func (e *exec) Destroy() {
	e.mu.Lock()
	r := e.cur
	e.cur = nil
	e.mu.Unlock()
	if r != nil {
		e.d.release(r)
		e.d.budget.Uncharge(e.bytes)
	}
}
