package engine

import (
	"fmt"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
)

// PositionsName is the positions resource's name.
const PositionsName = "positions"

// positionsResource is the resource that counts each request's positions: a step's
// tokens land at the positions after everything admitted before it, so a
// pre-planned step N+1 already sees step N's tokens though N has not
// committed.
type positionsResource struct {
	slots *slotTensors
	reqs  map[int64]*posState
}

type posState struct{ committed, next int }

// posRecord is what a step admitted: each row's first position and count.
type posRecord struct{ start, count []int }

// newPositions makes the resource.
func newPositions(dev accel.Device) *positionsResource {
	return &positionsResource{slots: newSlotTensors(dev), reqs: map[int64]*posState{}}
}

func (p *positionsResource) Name() string        { return PositionsName }
func (p *positionsResource) DependsOn() []string { return nil }

func (p *positionsResource) Ingest(id int64, info requestInfo) error {
	if _, dup := p.reqs[id]; dup {
		return fmt.Errorf("positions: row %d already open", id)
	}
	p.reqs[id] = &posState{}
	if f := info.Fork; f != nil {
		// A fork starts where the positions it shares end.
		p.reqs[id] = &posState{committed: f.At, next: f.At}
	}
	return nil
}

func (p *positionsResource) Remove(id int64) error { delete(p.reqs, id); return nil }

func (p *positionsResource) Reset(id int64, _ bool) error {
	if st, ok := p.reqs[id]; ok {
		*st = posState{}
	}
	return nil
}

func (p *positionsResource) Admit(step *Step) (admitStatus, int) {
	rec := &posRecord{start: make([]int, len(step.Rows)), count: make([]int, len(step.Rows))}
	for _, r := range step.Rows {
		if _, ok := p.reqs[r.ID]; !ok {
			return admitAllocFailed, 0
		}
	}
	for i, r := range step.Rows {
		st := p.reqs[r.ID]
		rec.start[i], rec.count[i] = st.next, len(r.Tokens)
		if atRest(r.ID, step) {
			continue
		}
		st.next += len(r.Tokens)
	}
	step.State[PositionsName] = rec
	return admitOK, 0
}

func (p *positionsResource) Unadmit(step *Step) {
	rec, ok := step.State[PositionsName].(*posRecord)
	if !ok {
		return
	}
	for i, r := range step.Rows {
		if st, ok := p.reqs[r.ID]; ok && !atRest(r.ID, step) {
			st.next -= rec.count[i]
		}
	}
	delete(step.State, PositionsName)
}

// atRest reports whether a row stays at rest through the step: padding rows
// outside a capture always do (position 0, no storage), so that a pre-planned
// step and the step before it never share their state.
func atRest(id int64, step *Step) bool {
	return graph.IsPadding(id) && (step.Lease == nil || !step.Lease.Capture)
}

// Starts is each row's first position in an admitted step.
func (p *positionsResource) Starts(step *Step) []int {
	if rec, ok := step.State[PositionsName].(*posRecord); ok {
		return rec.start
	}
	return nil
}

// Plan writes one position per token of the step; tokens past the real ones
// (a packed bucket's tail) get position 0.
func (p *positionsResource) Plan(s accel.Stream, sg *accel.Stager, step *Step) (any, error) {
	rec := step.State[PositionsName].(*posRecord)
	pos := make([]int32, step.Tokens)
	t := 0
	for i := range step.Rows {
		for k := 0; k < rec.count[i]; k++ {
			pos[t] = int32(rec.start[i] + k)
			t++
		}
	}
	ts, err := p.slots.get(PositionsName, s, step, []shape{{accel.I32, 1, step.Tokens}})
	if err != nil {
		return nil, err
	}
	if err := stage(s, sg, ts[0], accel.I32Bytes(pos)); err != nil {
		return nil, err
	}
	return ts[0], nil
}

func (p *positionsResource) Commit(step *Step) error {
	rec, ok := step.State[PositionsName].(*posRecord)
	if !ok {
		return fmt.Errorf("positions: commit of a step never admitted")
	}
	for i, r := range step.Rows[:step.Real] {
		if st, ok := p.reqs[r.ID]; ok {
			st.committed += rec.count[i]
		}
	}
	return nil
}

// Committed is a request's committed length.
func (p *positionsResource) Committed(id int64) int {
	if st, ok := p.reqs[id]; ok {
		return st.committed
	}
	return 0
}

// Close frees the per-slot plan buffers.
func (p *positionsResource) Close() { p.slots.free() }

func (p *positionsResource) SupportsPrePlan() bool    { return true }
func (p *positionsResource) ForcesDoubleBuffer() bool { return true }
func (p *positionsResource) CanCapture() bool         { return true }

func (p *positionsResource) BuildGraphBuffers(specs []graph.SlotSpec) error {
	return p.slots.build(PositionsName, specs, func(sp graph.SlotSpec) []shape {
		return []shape{{accel.I32, 1, sp.Bucket.Tokens}}
	})
}
