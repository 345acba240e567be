//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/alloc"
)

type nodeKind uint8

const (
	nodeKernel nodeKind = iota + 1
	nodeCopy            // device to device
	nodeUpload          // from pinned host memory
	nodeExec            // an executable launched during capture (inlined)
)

// node is one recorded operation, kept beside the driver's graph: its kinds
// and ops are the topology Update compares, and its calls are what an
// executable launched during another capture re-issues there.
type node struct {
	kind  nodeKind
	call  accel.Call
	dst   accel.Buffer
	src   accel.Buffer
	hsrc  accel.HostBuffer
	inner []node // nodeExec: the child's nodes when it was launched
}

// graph is a CUgraph from stream capture.
type graph struct {
	d     *Device
	h     uintptr // 0 once destroyed (or the device closed)
	pool  *alloc.Pool
	nodes []node
	mem   accel.GraphMemory
	once  sync.Once
}

func (g *graph) Nodes() int                { return len(g.nodes) }
func (g *graph) Memory() accel.GraphMemory { return g.mem }

// Destroy releases the graph; the pool's memory goes back once every graph
// and executable captured into it is gone and the pool is released.
func (g *graph) Destroy() {
	g.once.Do(func() {
		d := g.d
		d.mu.Lock()
		_, live := d.graphs[g]
		delete(d.graphs, g)
		h := g.h
		g.h = 0
		d.mu.Unlock()
		if live && h != 0 && !d.closedA.Load() {
			d.enter()
			call32(d.drv.cuGraphDestroy, h)
			d.leave()
		}
		d.Caching().GraphDestroyed(g.pool)
	})
}

// instantiate makes an executable of a graph, measuring the device memory it
// took.
func (d *Device) instantiate(h uintptr) (uintptr, int64, error) {
	free0, ok0 := d.realFree()
	d.enter()
	var e uintptr
	err := d.drv.err("cuGraphInstantiateWithFlags", call32(d.drv.cuGraphInstantiateWithFlags, uintptr(unsafe.Pointer(&e)), h, 0))
	d.leave()
	if err != nil {
		return 0, 0, err
	}
	free1, ok1 := d.realFree()
	var took int64
	if ok0 && ok1 && free0 > free1 {
		took = free0 - free1
	}
	return e, took, nil
}

// Instantiate makes the executable and charges its memory: the larger of
// ExecBytesPerNode per recorded operation and the drop of the driver's free
// memory across the instantiation. The executable holds a reference on the
// pool, like the graph.
func (g *graph) Instantiate() (accel.Exec, error) {
	d := g.d
	if err := d.check(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	h := g.h
	d.mu.Unlock()
	if h == 0 {
		return nil, fmt.Errorf("cuda: instantiate of a destroyed graph: %w", accel.ErrInvalidArgument)
	}
	eh, took, err := d.instantiate(h)
	if err != nil {
		return nil, fmt.Errorf("cuda: instantiate a %d-node graph: %w", len(g.nodes), err)
	}
	bytes := max(int64(len(g.nodes))*ExecBytesPerNode, took)
	if err := d.budget.Charge(bytes); err != nil {
		d.enter()
		call32(d.drv.cuGraphExecDestroy, eh)
		d.leave()
		return nil, fmt.Errorf("cuda: instantiate a %d-node graph: %w", len(g.nodes), err)
	}
	d.Caching().GraphCreated(g.pool)
	e := &exec{d: d, h: eh, nodes: g.nodes, sig: accel.Topology(g.nodes, (*node).sig), bytes: bytes, pool: g.pool}
	d.mu.Lock()
	d.execs[e] = struct{}{}
	d.mu.Unlock()
	return e, nil
}

// sig is what must not change for an update: the node's kind and op.
func (n *node) sig() accel.NodeSig { return accel.NodeSig{Kind: uint8(n.kind), Op: n.call.Op} }

// exec is a CUgraphExec.
type exec struct {
	d     *Device
	mu    sync.RWMutex // Launch reads h and nodes; Update and Destroy replace them
	h     uintptr      // 0 once destroyed
	nodes []node
	sig   []accel.NodeSig
	bytes int64
	pool  *alloc.Pool
}

func (e *exec) Nodes() int    { return len(e.sig) }
func (e *exec) Memory() int64 { return e.bytes }

// Launch replays the executable on s with cuGraphLaunch. On a capturing
// stream its operations are issued again instead, so the capture records
// them (inlined, as the CPU device does).
func (e *exec) Launch(s accel.Stream) error {
	st, ok := s.(*stream)
	if !ok || st.d != e.d {
		return fmt.Errorf("cuda: launch on a stream of another device: %w", accel.ErrInvalidArgument)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.h == 0 {
		return fmt.Errorf("cuda: launch of a destroyed executable: %w", accel.ErrInvalidArgument)
	}
	if st.cap != nil {
		st.cap.Nodes = append(st.cap.Nodes, node{kind: nodeExec, inner: e.nodes})
		return st.reissue(e.nodes)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return st.closedErr()
	}
	st.d.enter()
	defer st.d.leave()
	return st.result("cuGraphLaunch", call32(st.d.drv.cuGraphLaunch, e.h, st.h))
}

// reissue enqueues recorded nodes again, without recording them (the caller
// recorded their parent).
func (s *stream) reissue(ns []node) error {
	for i := range ns {
		n := &ns[i]
		switch n.kind {
		case nodeKernel:
			kl, err := prepare(&n.call, s.d.resolve, s.blas != 0)
			if err != nil {
				return err
			}
			if err := s.issue(kl); err != nil {
				return err
			}
		case nodeCopy:
			dp, err := s.d.resolve(n.dst, 1)
			if err != nil {
				return err
			}
			sp, err := s.d.resolve(n.src, 1)
			if err != nil {
				return err
			}
			if err := s.copyDtoD(dp, sp, n.dst.Len()); err != nil {
				return err
			}
		case nodeUpload:
			hm, ok := s.d.hostOf(n.hsrc)
			if !ok {
				return fmt.Errorf("cuda: a replayed upload's pinned memory was freed: %w", accel.ErrInvalidArgument)
			}
			dp, err := s.d.resolve(n.dst, 1)
			if err != nil {
				return err
			}
			if err := s.copyHtoD(dp, hm.ptr+uintptr(n.hsrc.Offset()), n.dst.Len()); err != nil {
				return err
			}
		case nodeExec:
			if err := s.reissue(n.inner); err != nil {
				return err
			}
		}
	}
	return nil
}

// Update takes g's arguments. A graph of another topology (other node kinds
// or ops, or another number of nodes) is refused with
// accel.ErrTopologyChanged before the driver is asked, and the executable is
// unchanged. Otherwise cuGraphExecUpdate_v2 updates it in place; where the
// driver refuses anyway (it compares more than reprise records, e.g. which
// kernels cuBLAS chose), the executable is re-instantiated from g and
// replaces the old one, whose pending replays still complete.
func (e *exec) Update(g accel.Graph) error {
	gg, ok := g.(*graph)
	if !ok || gg.d != e.d {
		return fmt.Errorf("cuda: update from a graph of another device: %w", accel.ErrInvalidArgument)
	}
	if err := accel.CheckTopology(accel.Topology(gg.nodes, (*node).sig), e.sig); err != nil {
		return fmt.Errorf("cuda: update: %w", err)
	}
	d := e.d
	if err := d.check(); err != nil {
		return err
	}
	d.mu.Lock()
	gh := gg.h
	d.mu.Unlock()
	if gh == 0 {
		return fmt.Errorf("cuda: update from a destroyed graph: %w", accel.ErrInvalidArgument)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h == 0 {
		return fmt.Errorf("cuda: update of a destroyed executable: %w", accel.ErrInvalidArgument)
	}
	var info struct {
		result        uint32
		_             uint32
		errorNode     uintptr
		errorFromNode uintptr
	}
	d.enter()
	code := call32(d.drv.cuGraphExecUpdate, e.h, gh, uintptr(unsafe.Pointer(&info)))
	d.leave()
	if code != cuSuccess || info.result != cuGraphUpdateSuccess {
		nh, _, err := d.instantiate(gh)
		if err != nil {
			why := d.drv.err("cuGraphExecUpdate_v2", code)
			if why == nil {
				why = fmt.Errorf("cuGraphExecUpdate_v2 returned success")
			}
			return fmt.Errorf("cuda: update: the driver refused the in-place update (%v, update result %d) and re-instantiating failed: %w",
				why, info.result, err)
		}
		d.enter()
		call32(d.drv.cuGraphExecDestroy, e.h)
		d.leave()
		e.h = nh
	}
	if gg.pool != e.pool {
		d.Caching().GraphCreated(gg.pool)
		d.Caching().GraphDestroyed(e.pool)
		e.pool = gg.pool
	}
	e.nodes = gg.nodes
	return nil
}

// Destroy releases the executable (cuGraphExecDestroy frees it once its
// pending replays have run) and its memory charge.
func (e *exec) Destroy() {
	d := e.d
	e.mu.Lock()
	h := e.h
	e.h = 0
	e.mu.Unlock()
	d.mu.Lock()
	_, live := d.execs[e]
	delete(d.execs, e)
	d.mu.Unlock()
	if h == 0 && !live {
		return
	}
	if h != 0 && !d.closedA.Load() {
		d.enter()
		call32(d.drv.cuGraphExecDestroy, h)
		d.leave()
	}
	d.budget.Uncharge(e.bytes)
	d.Caching().GraphDestroyed(e.pool)
}
