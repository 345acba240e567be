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

// canLease is the region's CanLease for these real rows; true when it sets
// none.
func (rr *regionRun) canLease(rows []graph.Row) bool {
	return rr.reg.CanLease == nil || rr.reg.CanLease(rows)
}

// leaseBeforeStep reports whether the region takes its slot ahead of the
// forward, when the step around it is prepared.
func (rr *regionRun) leaseBeforeStep() bool { return rr.reg.LeaseBeforeStep }

// lease picks the region's bucket and slot for a step, or nil (eager).
func (rr *regionRun) lease(e *Engine, step *Step) *graph.Lease {
	if rr.runner == nil || e.forceEager {
		return nil
	}
	real := step.Rows[:step.Real]
	if !rr.canLease(real) {
		rr.runner.NoteEager(rr.reg.Config.Walk, "the region's CanLease refused the batch")
		return nil
	}
	lease := rr.runner.LeaseSlot(graph.LeaseRequest{Walk: rr.reg.Config.Walk, Rows: step.Real, Tokens: step.Tokens, Key: step.Key})
	if lease == nil && e.bg != nil {
		e.bg.want(rr.runner, rr.reg.Config.Walk, step.Real, step.Tokens)
		rr.runner.NoteEager(rr.reg.Config.Walk, "bucket not captured yet")
	} else if lease == nil {
		rr.runner.NoteEager(rr.reg.Config.Walk, "no shape fits")
	}
	return lease
}

// regionStep is the region's own step inside step: the real rows only, on
// the region's lease, sharing the step's admission.
func regionStep(step *Step, lease *graph.Lease) *Step {
	return &Step{Walk: lease.Bucket.Walk, Key: step.Key, Rows: step.Rows[:step.Real], Real: step.Real, Lease: lease,
		Tokens: lease.Bucket.Tokens, plans: map[string]any{}, State: step.State}
}

// plannedRegion is a region step leased and planned ahead of the forward
// around it, on the region runner's plan stream: done is recorded after its
// plan, and the region's replay waits on it.
type plannedRegion struct {
	step *Step
	done accel.Event
}

// leaseRegionsBefore leases and plans, for an eager step just prepared,
// every region of its walk that leases before the step. Each region is
// planned as decode's next step is pre-planned: on its runner's plan stream,
// never the replay stream (the step's eager work goes on meanwhile), with an
// event its replay waits on; the forward then only stages and replays. On
// an error, what was planned has settled.
func (e *Engine) leaseRegionsBefore(step *Step) error {
	if step.Lease != nil {
		return nil // a captured whole step runs its regions inline
	}
	for _, label := range e.regionLabels() {
		rr := e.regions[label]
		if rr.reg.Walk != step.Walk || !rr.leaseBeforeStep() {
			continue
		}
		lease := rr.lease(e, step)
		if lease == nil {
			continue
		}
		rs := regionStep(step, lease)
		ps := rr.runner.PlanStream()
		err := rr.sr.Plan(ps, e.stager, rs)
		var ev accel.Event
		if err == nil {
			if ev, err = e.dev.NewEvent(); err == nil {
				err = ps.Record(ev)
			}
		}
		if err != nil {
			// Its copies may be in flight: let them land before the
			// caller undoes the step.
			_ = ps.Synchronize()
			e.settleRegions(step)
			return fmt.Errorf("engine: region %s: plan before the step: %w", label, err)
		}
		if step.regions == nil {
			step.regions = map[string]*plannedRegion{}
		}
		step.regions[label] = &plannedRegion{step: rs, done: ev}
	}
	return nil
}

// settleRegions waits for the plans of a step's regions planned ahead, for a
// step that fails before (or without) replaying them: nothing may write
// their slot buffers after the step is undone.
func (e *Engine) settleRegions(step *Step) {
	for _, p := range step.regions {
		_ = p.done.Synchronize()
	}
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
		// Leased and planned ahead when the step was prepared (the replay
		// waits on its plan's event), or now, on the replay stream.
		var rs *Step
		var planDone accel.Event
		var plan func(accel.Stream) error
		if p := step.regions[label]; p != nil {
			rs, planDone = p.step, p.done
		} else {
			if rr.leaseBeforeStep() {
				// It was asked when the step was prepared and refused.
				return e.inlineRegion(outer)(l, label, in)
			}
			lease := rr.lease(e, step)
			if lease == nil {
				return e.inlineRegion(outer)(l, label, in)
			}
			rs = regionStep(step, lease)
			plan = func(s accel.Stream) error { return rr.sr.Plan(s, e.stager, rs) }
		}
		out, err := rr.runner.RunRegion(rs.Lease, in, step.Tokens, planDone, plan)
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
