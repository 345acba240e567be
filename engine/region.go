package engine

import (
	"fmt"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
)

// regionRun is one region of the model: its declaration, the step runner
// over the resources it reads, its node, and its graph runner (nil until
// graphs start, or with graphs off).
type regionRun struct {
	reg    Region
	sr     *stepRunner
	node   *regionNode
	runner *graph.Runner
}

// regionNode is a region's side of its graph runner: the region's step is
// planned by the resources the region reads, into the lease's slot buffers.
type regionNode struct {
	e  *Engine
	rr *regionRun

	slots slotSteps
}

func (n *regionNode) DoubleBuffer() bool {
	// Only a resource that forces it: the region's plan runs in step with
	// its replay, never ahead of it.
	for _, r := range n.rr.sr.Resources() {
		if r.ForcesDoubleBuffer() {
			return true
		}
	}
	return false
}

func (n *regionNode) Blocked(cfg *graph.Config) []string { return n.rr.sr.Blocked(cfg.Walk) }

func (n *regionNode) BuildGraphBuffers(specs []graph.SlotSpec) error {
	return n.rr.sr.BuildGraphBuffers(specs)
}

// IngestPadding opens padding rows in every resource of the engine (the
// padding handles of a region are its own).
func (n *regionNode) IngestPadding(ids []int64) error { return n.e.node.IngestPadding(ids) }

func (n *regionNode) ResetPadding(ids []int64, free bool) error { return n.e.sr.Reset(ids, free) }

func (n *regionNode) Prepare(s accel.Stream, lease *graph.Lease, rows []graph.Row) (graph.Inputs, error) {
	step := newStep(lease.Bucket.Walk, lease.Bucket.Key, rows, 0, lease)
	if err := n.slots.prepare(n.rr.sr, s, n.e.stager, step); err != nil {
		return nil, notAdmitted(n.e.sr, err)
	}
	return n.rr.reg.Inputs(step), nil
}

func (n *regionNode) Forward(l *accel.Launcher, lease *graph.Lease, in map[string]accel.Tensor) (map[string]accel.Tensor, error) {
	step, err := n.slots.get(lease)
	if err != nil {
		return nil, fmt.Errorf("region %s: %w", n.rr.reg.Label, err)
	}
	rm := n.e.model.(RegionModel)
	b, err := n.e.batch(step, in)
	if err != nil {
		return nil, err
	}
	return rm.RegionForward(l, n.rr.reg.Label, b)
}

// batch assembles a step's batch, with its regions run by the region
// runners when the step is eager (a region inside a captured whole step runs
// inline: it is part of that graph).
func (e *Engine) batch(step *Step, in map[string]accel.Tensor) (*Batch, error) {
	b, err := batchFor(step, in)
	if err != nil {
		return nil, err
	}
	if step.Lease == nil {
		b.region = e.regionFor(step, b)
	} else {
		b.region = e.inlineRegion(b)
	}
	return b, nil
}

// inlineRegion runs a region as part of the forward around it.
func (e *Engine) inlineRegion(outer *Batch) func(*accel.Launcher, string, map[string]accel.Tensor) (*RegionResult, error) {
	return func(l *accel.Launcher, label string, in map[string]accel.Tensor) (*RegionResult, error) {
		rm, ok := e.model.(RegionModel)
		if !ok {
			return nil, fmt.Errorf("engine: the model runs region %q but declares none", label)
		}
		b := *outer
		b.In = in
		outs, err := rm.RegionForward(l, label, &b)
		if err != nil {
			return nil, err
		}
		return &RegionResult{Out: outs, owned: mapTensors(outs)}, nil
	}
}

// regionFor returns the function a step's Batch runs regions with: a replay
// on the region's runner when a shape fits, the model's region eagerly
// otherwise. The outer step was admitted and planned already; the region
// plans its resources again, from the same admission, into the lease's slot
// buffers, for the real rows only.
func (e *Engine) regionFor(step *Step, outer *Batch) func(*accel.Launcher, string, map[string]accel.Tensor) (*RegionResult, error) {
	return func(l *accel.Launcher, label string, in map[string]accel.Tensor) (*RegionResult, error) {
		rr := e.regions[label]
		if rr == nil {
			return nil, fmt.Errorf("engine: the model runs region %q it did not declare", label)
		}
		var lease *graph.Lease
		if rr.runner != nil && !e.forceEager {
			lease = rr.runner.LeaseSlot(graph.LeaseRequest{Walk: rr.reg.Config.Walk, Rows: step.Real, Tokens: step.Tokens, Key: step.Key})
			if lease == nil && e.bg != nil {
				e.bg.want(rr.runner, rr.reg.Config.Walk, step.Real, step.Tokens)
				rr.runner.NoteEager(rr.reg.Config.Walk, "bucket not captured yet")
			} else if lease == nil {
				rr.runner.NoteEager(rr.reg.Config.Walk, "no shape fits")
			}
		}
		if lease == nil {
			return e.inlineRegion(outer)(l, label, in)
		}
		rs := &Step{Walk: lease.Bucket.Walk, Key: step.Key, Rows: step.Rows[:step.Real], Real: step.Real, Lease: lease,
			Tokens: lease.Bucket.Tokens, plans: map[string]any{}, State: step.State}
		out, err := rr.runner.RunRegion(lease, in, step.Tokens, func(s accel.Stream) error {
			return rr.sr.Plan(s, e.stager, rs)
		})
		if err != nil {
			return nil, err
		}
		res := &RegionResult{Out: map[string]accel.Tensor{}}
		for _, name := range out.Names() {
			res.Out[name], _ = out.View(name)
		}
		return res, nil
	}
}
