package engine

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
	"github.com/reprise-ml/reprise/internal/failpoint"
)

// prePlan is decode step N+1, admitted and planned into its lease's slot on
// the plan stream while step N replays.
type prePlan struct {
	ids   []int64
	lease *graph.Lease
	step  *Step
	done  accel.Event
}

// runStep runs one step of rows (requests only) and returns each row's
// sampled token. A step with a lease replays; without one it runs eager.
// reqs are the rows' requests (their sampling variant selects the graph's
// key info); next are the requests of a decode step, whose step N+1 may be
// pre-planned while this one runs.
func (e *Engine) runStep(walk string, rows []graph.Row, reqs, next []*request) ([]int32, error) {
	defer failpoint.Enter(failpoint.PhaseStep)()
	t0 := time.Now()
	n := len(rows)
	tokens := 0
	for _, r := range rows {
		tokens += len(r.Tokens)
	}
	s := e.stream
	key := samplingKey(reqs)
	step, planDone := e.takePrePlan(walk, rows)
	var lease *graph.Lease
	if step != nil {
		lease = step.Lease
		for i := range rows {
			step.Rows[i].Tokens = rows[i].Tokens
		}
	} else {
		if e.runner != nil && !e.forceEager {
			lease = e.runner.LeaseSlot(graph.LeaseRequest{Walk: walk, Rows: n, Tokens: tokens, Key: key})
			if lease == nil && e.bg != nil {
				e.bg.want(e.runner, walk, n, tokens)
				e.runner.NoteEager(walk, "bucket not captured yet")
			} else if lease == nil && e.runner.CapturesWalk(walk) {
				e.runner.NoteEager(walk, e.fallbackReason(walk, n, key))
			}
		}
		padded := rows
		if lease != nil {
			var err error
			if padded, err = e.runner.PadInputs(lease, rows); err != nil {
				return nil, err
			}
		}
		step = newStep(walk, key, padded, n, lease)
		if err := e.node.prepare(s, step); err != nil {
			if lease != nil {
				_ = e.runner.Discard(lease)
			}
			return nil, err
		}
		if err := e.leaseRegionsBefore(step); err != nil {
			e.sr.Abort(step)
			return nil, err
		}
	}
	in := e.model.Preprocess(step)
	var outs map[string]accel.Tensor
	var err error
	if lease != nil {
		outs, err = e.runner.RunForward(lease, in, planDone)
	} else {
		outs, err = e.eagerForward(s, step, in)
	}
	if err == nil && next != nil {
		// The device runs step N; plan N+1 meanwhile.
		e.prePlanNext(next)
	}
	var toks []int32
	if err == nil {
		toks, err = e.readNext(s, outs[OutputNext], n)
	}
	if err == nil {
		err = e.readScores(s, step.Key, outs, reqs, n)
	}
	if err == nil && e.keepLogits {
		e.lastLogits = nil
		if lg, ok := outs[OutputLogits]; ok {
			var all []float32
			if all, err = accel.DownloadF32(s, lg); err == nil {
				e.lastLogits = all[:n*lg.Cols]
			}
		}
	}
	if lease == nil {
		l := accel.On(s)
		l.Free(mapTensors(outs)...)
		if ferr := l.Err(); ferr != nil && err == nil {
			err = ferr
		}
		if ferr := e.sr.Finish(step); ferr != nil && err == nil {
			err = ferr
		}
	}
	if err != nil {
		e.settleRegions(step)
		e.sr.Abort(step)
		if lease != nil {
			_ = e.runner.Release(lease, n)
		}
		return nil, err
	}
	if err := e.sr.Commit(step); err != nil {
		return nil, err
	}
	if lease != nil {
		if err := e.runner.Release(lease, n); err != nil {
			return nil, err
		}
	}
	e.stats.observeStep(walk, lease != nil, n, time.Since(t0))
	if e.traceStep != nil {
		mode := "eager"
		if lease != nil {
			mode = fmt.Sprintf("replay %v slot %d", lease.Bucket, lease.Slot)
		}
		if planDone != nil {
			mode += " pre-planned"
		}
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		e.traceStep(fmt.Sprintf("%s rows=%v tokens=%d %s", walk, ids, tokens, mode))
	}
	return toks, nil
}

// fallbackReason says why no captured bucket fits a step.
func (e *Engine) fallbackReason(walk string, bs int, key string) string {
	if e.runner.SelectBucket(walk, bs, 0, key) == nil {
		if key != "" && e.runner.SelectBucket(walk, bs, 0, "") != nil {
			return "no capture of the " + key + " variant"
		}
		return "batch larger than any capture"
	}
	return "more tokens than any capture of the batch"
}

// eagerForward uploads the step's inputs and enqueues the model's forward.
func (e *Engine) eagerForward(s accel.Stream, step *Step, in graph.Inputs) (map[string]accel.Tensor, error) {
	dev := make(map[string]accel.Tensor, len(in))
	for name, h := range in {
		t, err := step.Alloc(s, h.DType, h.Rows, h.Cols)
		if err != nil {
			return nil, err
		}
		if len(h.Data) > 0 {
			if err := stage(s, e.stager, t, h.Data); err != nil {
				return nil, err
			}
		}
		dev[name] = t
	}
	b, err := e.batch(step, dev)
	if err != nil {
		return nil, err
	}
	l := accel.On(s)
	outs, err := e.model.Forward(l, b)
	if err == nil {
		err = l.Err()
	}
	return outs, err
}

// readNext waits for the step and reads its sampled tokens.
func (e *Engine) readNext(s accel.Stream, next accel.Tensor, n int) ([]int32, error) {
	if next.IsNil() || next.Len() < n {
		return nil, fmt.Errorf("engine: the forward gave no %d-row %q output (got %v)", n, OutputNext, next)
	}
	h := e.host.Slice(0, int64(n)*4)
	if err := s.CopyDtoH(h, next.Buf.Slice(0, int64(n)*4)); err != nil {
		return nil, err
	}
	if err := s.Synchronize(); err != nil {
		return nil, err
	}
	return accel.BytesI32(h.Bytes()), nil
}

// prePlanNext admits and plans decode step N+1 for the requests that will
// still run after step N, on the plan stream, into a slot step N does not
// use. Tokens are not known yet: only counts matter to the plan, and the
// tokens are staged at replay.
func (e *Engine) prePlanNext(batch []*request) {
	defer failpoint.Enter(failpoint.PhasePrePlan)()
	if e.runner == nil || e.forceEager || e.opts.NoPrePlan || e.runner.NumSlots() < 2 || e.pre != nil {
		return
	}
	e.mu.Lock()
	arriving := len(e.queue) > 0
	e.mu.Unlock()
	if arriving || len(e.waiting) > 0 || len(e.running) > e.opts.MaxBatch {
		return // the next step will be a prefill or a rotation: the plan would be stale
	}
	var ids []int64
	var kept []*request
	for _, r := range batch {
		if len(r.generated)+1 < r.req.MaxTokens && !r.cancelled.Load() {
			ids = append(ids, r.id)
			kept = append(kept, r)
		}
	}
	if len(ids) == 0 {
		return
	}
	key := samplingKey(kept)
	lease := e.runner.LeaseSlot(graph.LeaseRequest{Walk: WalkDecode, Rows: len(ids), AheadOfInputs: true, Key: key})
	if lease == nil {
		return
	}
	// A declare-only step: the bucket's cached template rows (their tokens
	// are placeholders, never written; the replay stages the real ones)
	// addressed by the step's ids, real ones first, then the slot's padding
	// rows. Building fresh rows each step is what DeclareInputsFor saves.
	tmpl, err := e.runner.DeclareInputsFor(lease)
	if err != nil {
		return
	}
	stepIDs, err := e.runner.StepIDs(lease, ids)
	if err != nil {
		return
	}
	padded := make([]graph.Row, len(tmpl))
	for i := range tmpl {
		padded[i] = graph.Row{ID: stepIDs[i], Tokens: tmpl[i].Tokens}
	}
	step := newStep(WalkDecode, key, padded, len(ids), lease)
	ps := e.runner.PlanStream()
	if err := e.node.prepare(ps, step); err != nil {
		_ = e.runner.Discard(lease)
		return
	}
	ev, err := e.dev.NewEvent()
	if err == nil {
		err = ps.Record(ev)
	}
	if err != nil {
		e.sr.Abort(step)
		_ = e.runner.Discard(lease)
		return
	}
	e.pre = &prePlan{ids: ids, lease: lease, step: step, done: ev}
	e.stats.prePlans.Add(1)
}

// takePrePlan returns the pre-planned step if it is for exactly these rows,
// and discards it otherwise.
func (e *Engine) takePrePlan(walk string, rows []graph.Row) (*Step, accel.Event) {
	p := e.pre
	if p == nil {
		return nil, nil
	}
	if walk == WalkDecode && len(rows) == len(p.ids) {
		same := true
		for i, r := range rows {
			if r.ID != p.ids[i] {
				same = false
				break
			}
		}
		if same {
			e.pre = nil
			e.stats.prePlanHits.Add(1)
			return p.step, p.done
		}
	}
	e.discardPrePlan()
	return nil, nil
}

// discardPrePlan drops a stale pre-plan: its admissions are undone and its
// padding rows released.
func (e *Engine) discardPrePlan() {
	p := e.pre
	if p == nil {
		return
	}
	e.pre = nil
	// Its plan writes may still be in flight on the plan stream.
	_ = p.done.Synchronize()
	e.sr.Abort(p.step)
	_ = e.runner.Discard(p.lease)
	e.stats.prePlanStale.Add(1)
}

func mapTensors(m map[string]accel.Tensor) []accel.Tensor {
	names := slices.Sorted(maps.Keys(m))
	out := make([]accel.Tensor, 0, len(m))
	for _, k := range names {
		out = append(out, m[k])
	}
	return out
}
