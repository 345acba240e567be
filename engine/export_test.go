package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
)

// RegionPlanStream is the plan stream of a region's runner (nil before
// graphs start or for an unknown region).
func (e *Engine) RegionPlanStream(label string) accel.Stream {
	if rr := e.regions[label]; rr != nil && rr.runner != nil {
		return rr.runner.PlanStream()
	}
	return nil
}

// TraceSteps makes the engine call fn with one line per step it serves,
// from the loop. Call it before Start.
func (e *Engine) TraceSteps(fn func(string)) { e.traceStep = fn }

// KV is the engine's KV cache.
func (e *Engine) KV() *kvCache { return e.kv }

// OnLoop runs fn on the engine's loop goroutine, between two steps, and
// waits for it: what fn reads of the loop's state is exact, and what it
// submits or cancels is seen by the very next step.
func (e *Engine) OnLoop(ctx context.Context, fn func()) error { return e.do(ctx, fn) }

// PrePlanned is the request ids of the pre-planned next decode step, nil
// when there is none. Call it from OnLoop.
func (e *Engine) PrePlanned() []int64 {
	if e.pre == nil {
		return nil
	}
	return slices.Clone(e.pre.ids)
}

// PrePlanRows is the ids of the pre-planned step's rows (real, then
// padding) and whether every row's tokens are the runner's declare-only
// template rows for its lease (DeclareInputsFor), shared rather than built
// again. Call it from OnLoop.
func (e *Engine) PrePlanRows() ([]int64, bool) {
	if e.pre == nil {
		return nil, false
	}
	tmpl, err := e.runner.DeclareInputsFor(e.pre.lease)
	if err != nil || len(tmpl) != len(e.pre.step.Rows) {
		return nil, false
	}
	var ids []int64
	shared := true
	for i, r := range e.pre.step.Rows {
		ids = append(ids, r.ID)
		if len(r.Tokens) == 0 || &r.Tokens[0] != &tmpl[i].Tokens[0] {
			shared = false
		}
	}
	return ids, shared
}

// PaddingRow is a padding row's state in each of the engine's resources; -1
// where the resource does not hold the row.
type PaddingRow struct {
	ID                      int64
	PosNext, PosCommitted   int
	KVNext, KVPages         int
	SampNext, SampCommitted int
}

// PaddingRows is the state of every padding row open in any of the engine's
// resources, by id. Call it from OnLoop.
func (e *Engine) PaddingRows() []PaddingRow {
	ids := map[int64]bool{}
	for id := range e.pos.reqs {
		ids[id] = true
	}
	for id := range e.kv.reqs {
		ids[id] = true
	}
	for id := range e.samp.reqs {
		ids[id] = true
	}
	var out []PaddingRow
	for id := range ids {
		if !graph.IsPadding(id) {
			continue
		}
		r := PaddingRow{ID: id, PosNext: -1, PosCommitted: -1, KVNext: -1, KVPages: -1, SampNext: -1, SampCommitted: -1}
		if st, ok := e.pos.reqs[id]; ok {
			r.PosNext, r.PosCommitted = st.next, st.committed
		}
		if st, ok := e.kv.reqs[id]; ok {
			r.KVNext, r.KVPages = st.next, len(st.pages)
		}
		if st, ok := e.samp.reqs[id]; ok {
			r.SampNext, r.SampCommitted = st.next, st.committed
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b PaddingRow) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// UnrestPadding moves padding rows n positions away from rest in every
// resource (positions, KV length, sampler offsets; no pages), as a capture
// that did not clean up would leave them. Call it from OnLoop.
func (e *Engine) UnrestPadding(ids []int64, n int) error {
	for _, id := range ids {
		p, ok1 := e.pos.reqs[id]
		k, ok2 := e.kv.reqs[id]
		s, ok3 := e.samp.reqs[id]
		if !graph.IsPadding(id) || !ok1 || !ok2 || !ok3 {
			return fmt.Errorf("row %d is not a padding row open in every resource", id)
		}
		p.next, p.committed = n, n
		k.next = n
		s.next, s.committed = n, n
	}
	return nil
}

// SlotBufferKeys lists, by resource name (KVName, PositionsName,
// SamplerName, PenaltiesName), the per-slot keys each resource has built graph buffers for.
// Call it from the goroutine that owns the resources: OnLoop once started,
// or a forward the graph runners call during Start (warm-ups and captures
// run on Start's goroutine).
func (e *Engine) SlotBufferKeys() map[string][]graph.SlotKey {
	out := map[string][]graph.SlotKey{}
	for name, st := range map[string]*slotTensors{KVName: e.kv.slots, PositionsName: e.pos.slots, SamplerName: e.samp.slots, PenaltiesName: e.pen.slots} {
		out[name] = []graph.SlotKey{}
		for k := range st.bufs {
			out[name] = append(out[name], k)
		}
	}
	return out
}

// RunnerResources lists, by pool name (as Runners names them: "graphs", then
// each region's label), the resources whose per-slot buffers that runner's
// captures read, in sweep order.
func (e *Engine) RunnerResources() map[string][]string {
	names := func(sr *stepRunner) []string {
		var ns []string
		for _, r := range sr.Resources() {
			ns = append(ns, r.Name())
		}
		return ns
	}
	out := map[string][]string{"graphs": names(e.sr)}
	for label, rr := range e.regions {
		out[label] = names(rr.sr)
	}
	return out
}

// StartGraphsOnly makes and prepares the graph runners as Start does, without
// starting the loop: a test then drives background capture with
// BackgroundUnit from its own goroutine.
func (e *Engine) StartGraphsOnly(ctx context.Context) error { return e.startGraphs(ctx, true) }

// BackgroundUnit runs one unit of background capture, as the loop does
// between steps. It reports whether background capture is capturing
// buckets, how many wait, and whether it is over.
func (e *Engine) BackgroundUnit(ctx context.Context) (capturing bool, pending int, over bool) {
	if e.bg != nil {
		e.backgroundUnit(ctx)
	}
	if e.bg == nil {
		return false, 0, true
	}
	return e.bg.phase == bgCapture, len(e.bg.pending), false
}

// HoldPages opens a request of maxLen positions in the engine's resources
// (promised its pages), as if admitted; the returned func removes it.
func (e *Engine) HoldPages(id int64, maxLen int) (func(), error) {
	if err := e.sr.Ingest(id, requestInfo{MaxLen: maxLen}); err != nil {
		return nil, err
	}
	return func() { _ = e.sr.Remove(id) }, nil
}

// MaxBackoff is the longest a bucket refused for memory waits between
// tries, in background units.
const MaxBackoff = maxBackoff

// BatchCap is the decode batch cap the engine schedules with now. Call it
// from the goroutine driving the engine (OnLoop once started).
func (e *Engine) BatchCap() int { return e.opts.MaxBatch }

// CaptureTries is how often background capture has tried buckets that were
// refused for memory, over all buckets.
func (e *Engine) CaptureTries() int {
	if e.bg == nil {
		return 0
	}
	n := 0
	for it, f := range e.bg.refused {
		if it != warmItem(it.r) {
			n += f.tries
		}
	}
	return n
}
