package cpu

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/alloc"
)

// node is one recorded operation, with its operands as buffers; instantiation
// resolves them to memory.
type node struct {
	kind  taskKind
	call  accel.Call
	dst   accel.Buffer
	src   accel.Buffer
	hsrc  accel.HostBuffer
	child *exec
}

func (n *node) resolve() task {
	switch n.kind {
	case taskKernel:
		return task{kind: taskKernel, call: resolveCall(&n.call)}
	case taskCopy:
		dm, doff := memOf(n.dst)
		if !n.hsrc.IsNil() {
			return task{kind: taskCopy, dst: bytesOf(n.dst), src: n.hsrc.Bytes(), dm: dm, doff: doff}
		}
		return task{kind: taskCopy, dst: bytesOf(n.dst), src: bytesOf(n.src), dm: dm, doff: doff}
	case taskReplay:
		return task{kind: taskReplay, exec: n.child.cur.Load()}
	}
	panic("cpu: unknown node kind")
}

// nodes is an executable's resolved operations and their static schedule
// (schedule.go), replaced whole by Update so a replay already enqueued keeps
// the arguments it was launched with.
type nodes struct {
	n     []task
	sched *schedule
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

// Instantiate resolves every node once and charges the executable's memory.
func (g *graph) Instantiate() (accel.Exec, error) {
	bytes := int64(len(g.nodes)) * ExecBytesPerNode
	if err := g.d.budget.Charge(bytes); err != nil {
		return nil, fmt.Errorf("cpu: instantiate a %d-node graph: %w", len(g.nodes), err)
	}
	e := &exec{d: g.d, bytes: bytes, sig: accel.Topology(g.nodes, (*node).sig)}
	e.cur.Store(resolveAll(g.d, g.nodes))
	return e, nil
}

func resolveAll(d *Device, ns []node) *nodes {
	r := &nodes{n: make([]task, len(ns))}
	for i := range ns {
		r.n[i] = ns[i].resolve()
	}
	r.sched = buildSchedule(d, r.n)
	return r
}

// sig is what must not change for an in-place update: the node's kind and op.
func (n *node) sig() accel.NodeSig { return accel.NodeSig{Kind: uint8(n.kind), Op: n.call.Op} }

type exec struct {
	d     *Device
	cur   atomic.Pointer[nodes]
	sig   []accel.NodeSig
	bytes int64
	once  sync.Once
	dead  atomic.Bool
}

func (e *exec) Nodes() int { return len(e.sig) }

// Schedule describes the executable's static schedule (zero Workers: it
// replays node by node, as with one thread).
func (e *exec) Schedule() ScheduleStats {
	if s := e.cur.Load().sched; s != nil {
		return s.stats
	}
	return ScheduleStats{Workers: 1, Nodes: len(e.sig)}
}
func (e *exec) Memory() int64 { return e.bytes }

func (e *exec) Launch(s accel.Stream) error {
	st, ok := s.(*stream)
	if !ok || st.d != e.d {
		return fmt.Errorf("cpu: launch on a stream of another device: %w", accel.ErrInvalidArgument)
	}
	if e.dead.Load() {
		return fmt.Errorf("cpu: launch of a destroyed executable: %w", accel.ErrInvalidArgument)
	}
	if st.cap != nil {
		st.cap.Nodes = append(st.cap.Nodes, node{kind: taskReplay, child: e})
		return nil
	}
	return st.enqueue(task{kind: taskReplay, exec: e.cur.Load()})
}

func (e *exec) Update(g accel.Graph) error {
	gg, ok := g.(*graph)
	if !ok || gg.d != e.d {
		return fmt.Errorf("cpu: update from a graph of another device: %w", accel.ErrInvalidArgument)
	}
	if err := accel.CheckTopology(accel.Topology(gg.nodes, (*node).sig), e.sig); err != nil {
		return fmt.Errorf("cpu: update: %w", err)
	}
	e.cur.Store(resolveAll(e.d, gg.nodes))
	return nil
}

func (e *exec) Destroy() {
	e.once.Do(func() {
		e.dead.Store(true)
		e.d.budget.Uncharge(e.bytes)
	})
}
