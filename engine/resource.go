package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
)

// admitStatus is a resource's answer to a step.
type admitStatus int

// Admission outcomes.
const (
	// admitOK: the resource holds what the step needs.
	admitOK admitStatus = iota
	// admitPending: the step cannot run yet but will once others finish.
	admitPending
	// admitAllocFailed: the resource is short of storage (Short units).
	admitAllocFailed
)

func (a admitStatus) String() string {
	switch a {
	case admitOK:
		return "admitted"
	case admitPending:
		return "pending"
	case admitAllocFailed:
		return "allocation failed"
	}
	return fmt.Sprintf("admit(%d)", int(a))
}

// admitError says which resource refused a step and how. It is backpressure
// for the scheduler, never a crash.
type admitError struct {
	resource string
	Status   admitStatus
	Short    int // units the resource lacked (pages for the KV cache)
}

func (e *admitError) Error() string {
	if e.Status == admitAllocFailed {
		return fmt.Sprintf("engine: resource %s: %s (%d short)", e.resource, e.Status, e.Short)
	}
	return fmt.Sprintf("engine: resource %s: %s", e.resource, e.Status)
}

// requestInfo is what resources learn about a request when it is ingested.
type requestInfo struct {
	// MaxLen is the most positions the request will hold (prompt plus
	// generated tokens).
	MaxLen   int
	Sampling Sampling
	// Prompt, Penalties and Stops (what min_tokens masks) are for the
	// penalties resource.
	Prompt    []int32
	Penalties Penalties
	Stops     []int32
	// Fork, for a choice of a prompt another request prefilled, is the
	// request whose positions before At it shares (fork.go).
	Fork *forkInfo
}

// Step is one step of a node: rows (real ones first, then padding rows on a
// lease), the lease it replays on (nil: eager), and what each resource
// planned for it.
type Step struct {
	Walk string
	Key  string
	// Rows in batch order; the first Real are requests, the rest padding.
	Rows []graph.Row
	Real int
	// Lease is the bucket and slot the step replays on, nil for eager.
	Lease *graph.Lease
	// Tokens is the step's token count: the bucket's on a lease, else the
	// sum of the rows' tokens.
	Tokens int
	// plans holds each resource's plan, by resource name; read them with
	// their PlanKey.
	plans map[string]any
	// State holds each resource's private record of the step (what it
	// admitted, to roll back or commit).
	State map[string]any
	// eager plan buffers, freed by stepRunner.Finish
	scratch []accel.Buffer
	stream  accel.Stream
	// regions are the region steps leased and planned with this one
	// (Region.LeaseBeforeStep), by label.
	regions map[string]*plannedRegion
}

// newStep makes a step of rows.
func newStep(walk, key string, rows []graph.Row, real int, lease *graph.Lease) *Step {
	s := &Step{Walk: walk, Key: key, Rows: rows, Real: real, Lease: lease,
		plans: map[string]any{}, State: map[string]any{}}
	if lease != nil {
		s.Tokens = lease.Bucket.Tokens
	} else {
		for _, r := range rows {
			s.Tokens += len(r.Tokens)
		}
	}
	return s
}

// BatchSize is the number of rows the step's tensors have: the bucket's on a
// lease, else the real rows.
func (s *Step) BatchSize() int {
	if s.Lease != nil {
		return s.Lease.Bucket.BatchSize
	}
	return len(s.Rows)
}

// Alloc allocates an eager plan buffer on s's stream, freed by Finish. On a
// lease resources write into their per-slot buffers instead.
func (s *Step) Alloc(st accel.Stream, dt accel.DType, rows, cols int) (accel.Tensor, error) {
	b, err := st.Alloc(int64(rows) * int64(cols) * dt.Size())
	if err != nil {
		return accel.Tensor{}, err
	}
	s.scratch = append(s.scratch, b)
	s.stream = st
	return accel.Tensor{Buf: b, DType: dt, Rows: rows, Cols: cols}, nil
}

// resource is one kind of per-request state a node's steps use.
type resource interface {
	Name() string
	// DependsOn names resources whose plans this one reads.
	DependsOn() []string
	// Ingest opens a request (or a padding row: id < -1).
	Ingest(id int64, info requestInfo) error
	// Remove releases everything the request holds.
	Remove(id int64) error
	// Reset returns a row to rest (length and position 0); free also
	// releases its storage.
	Reset(id int64, free bool) error
	// Admit reserves what the step needs, or refuses it.
	Admit(step *Step) (admitStatus, int)
	// Unadmit undoes Admit for a step that will not run (a failed admission
	// of a later resource, a stale pre-plan).
	Unadmit(step *Step)
	// Plan writes the step's addressing for the device through st, enqueued
	// on s: into the lease's per-slot buffers, or eager buffers from
	// step.Alloc. The plans of the resources it depends on are already in
	// the step (read them with their PlanKey).
	Plan(s accel.Stream, st *accel.Stager, step *Step) (any, error)
	// Commit advances the real rows' state once the step ran.
	Commit(step *Step) error
	// SupportsPrePlan: its plan for step N+1 can run while step N replays.
	SupportsPrePlan() bool
	// ForcesDoubleBuffer: it copies host data into buffers a graph reads, so
	// plan(N+1) must not write the buffers step N's replay reads.
	ForcesDoubleBuffer() bool
	// BuildGraphBuffers claims per-slot buffers for every spec; repeatable,
	// it never moves a buffer it already gave.
	BuildGraphBuffers(specs []graph.SlotSpec) error
	// CanCapture reports whether steps using it can be captured.
	CanCapture() bool
}

// stepRunner sweeps a node's resources in dependency order (alphabetical
// among equals) through declare -> admit -> plan -> (forward) -> commit.
type stepRunner struct {
	res []resource
	// requests are the real requests open (padding rows aside).
	requests map[int64]bool
	// released counts the real requests removed: each gave back what it
	// held (Released).
	released uint64
	// uses is, per walk that declared it, the resources its steps use, in
	// sweep order (declare); a walk not in it uses every resource.
	uses map[string][]resource
}

// declare makes steps of walk use only the resources named (in sweep
// order), as a model's step declaration says (StepModel). An unknown name,
// or a resource used without one it depends on, is an error.
func (sr *stepRunner) declare(walk string, names []string) error {
	want := map[string]bool{}
	for _, n := range names {
		if sr.resource(n) == nil {
			return fmt.Errorf("engine: the %s step declares unknown resource %q", walk, n)
		}
		want[n] = true
	}
	var res []resource
	for _, r := range sr.res {
		if !want[r.Name()] {
			continue
		}
		for _, d := range r.DependsOn() {
			if !want[d] {
				return fmt.Errorf("engine: the %s step uses resource %q without %q, which it depends on", walk, r.Name(), d)
			}
		}
		res = append(res, r)
	}
	if sr.uses == nil {
		sr.uses = map[string][]resource{}
	}
	sr.uses[walk] = res
	return nil
}

// stepResources are the resources a step of walk uses, in sweep order.
func (sr *stepRunner) stepResources(walk string) []resource {
	if res, ok := sr.uses[walk]; ok {
		return res
	}
	return sr.res
}

// newStepRunner orders the resources. Unknown dependencies, a resource that
// depends on itself and cycles are errors.
func newStepRunner(rs ...resource) (*stepRunner, error) {
	byName := map[string]resource{}
	for _, r := range rs {
		if _, dup := byName[r.Name()]; dup {
			return nil, fmt.Errorf("engine: two resources named %q", r.Name())
		}
		byName[r.Name()] = r
	}
	for _, r := range rs {
		for _, d := range r.DependsOn() {
			if d == r.Name() {
				return nil, fmt.Errorf("engine: resource %q depends on itself", d)
			}
			if _, ok := byName[d]; !ok {
				return nil, fmt.Errorf("engine: resource %q depends on unknown resource %q", r.Name(), d)
			}
		}
	}
	var order []resource
	done := map[string]bool{}
	for len(order) < len(rs) {
		var ready []string
		for name, r := range byName {
			if done[name] {
				continue
			}
			ok := true
			for _, d := range r.DependsOn() {
				if !done[d] {
					ok = false
				}
			}
			if ok {
				ready = append(ready, name)
			}
		}
		if len(ready) == 0 {
			var left []string
			for name := range byName {
				if !done[name] {
					left = append(left, name)
				}
			}
			slices.Sort(left)
			return nil, fmt.Errorf("engine: resources depend on each other in a cycle: %s", strings.Join(left, ", "))
		}
		slices.Sort(ready)
		name := ready[0]
		done[name] = true
		order = append(order, byName[name])
	}
	return &stepRunner{res: order, requests: map[int64]bool{}}, nil
}

// Resources in sweep order.
func (sr *stepRunner) Resources() []resource { return sr.res }

// resource by name, or nil.
func (sr *stepRunner) resource(name string) resource {
	for _, r := range sr.res {
		if r.Name() == name {
			return r
		}
	}
	return nil
}

// Ingest opens a request in every resource; on failure the ones already
// opened are removed.
func (sr *stepRunner) Ingest(id int64, info requestInfo) error {
	for i, r := range sr.res {
		if err := r.Ingest(id, info); err != nil {
			for _, r2 := range sr.res[:i] {
				_ = r2.Remove(id)
			}
			return fmt.Errorf("engine: ingest %d into %s: %w", id, r.Name(), err)
		}
	}
	if !graph.IsPadding(id) {
		sr.requests[id] = true
	}
	return nil
}

// Released counts the real requests removed so far: when it moves on, what
// they held (KV pages, promises) is free again.
func (sr *stepRunner) Released() uint64 { return sr.released }

// Requests is the number of real requests open.
func (sr *stepRunner) Requests() int { return len(sr.requests) }

// Remove reaches every resource even if some fail; it returns the first
// error.
func (sr *stepRunner) Remove(id int64) error {
	if sr.requests[id] {
		sr.released++
	}
	delete(sr.requests, id)
	var first error
	for _, r := range sr.res {
		if err := r.Remove(id); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Reset returns rows to rest in every resource.
func (sr *stepRunner) Reset(ids []int64, free bool) error {
	var first error
	for _, r := range sr.res {
		for _, id := range ids {
			if err := r.Reset(id, free); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Admit admits the step in every resource in order, stopping at the first
// refusal (an *admitError naming it) after undoing the admissions before it.
func (sr *stepRunner) Admit(step *Step) error {
	res := sr.stepResources(step.Walk)
	for i, r := range res {
		st, short := r.Admit(step)
		if st != admitOK {
			for j := i - 1; j >= 0; j-- {
				res[j].Unadmit(step)
			}
			return &admitError{resource: r.Name(), Status: st, Short: short}
		}
	}
	return nil
}

// Plan plans the step in every resource in order, each seeing the plans of
// those before it.
func (sr *stepRunner) Plan(s accel.Stream, st *accel.Stager, step *Step) error {
	for _, r := range sr.stepResources(step.Walk) {
		p, err := r.Plan(s, st, step)
		if err != nil {
			return fmt.Errorf("engine: plan %s: %w", r.Name(), err)
		}
		step.plans[r.Name()] = p
	}
	return nil
}

// Commit commits the step in every resource, reaching all even after an
// error.
func (sr *stepRunner) Commit(step *Step) error {
	var first error
	for _, r := range sr.stepResources(step.Walk) {
		if err := r.Commit(step); err != nil && first == nil {
			first = fmt.Errorf("engine: commit %s: %w", r.Name(), err)
		}
	}
	return first
}

// Abort undoes an admitted step that will not run, in every resource.
func (sr *stepRunner) Abort(step *Step) {
	res := sr.stepResources(step.Walk)
	for i := len(res) - 1; i >= 0; i-- {
		res[i].Unadmit(step)
	}
}

// Finish frees the step's eager plan buffers (in stream order, so work
// already enqueued still reads them).
func (sr *stepRunner) Finish(step *Step) error {
	var errs []error
	for _, b := range step.scratch {
		errs = append(errs, step.stream.Free(b))
	}
	step.scratch = nil
	return errors.Join(errs...)
}

// DoubleBuffer reports whether buckets need two slots.
func (sr *stepRunner) DoubleBuffer() bool {
	for _, r := range sr.res {
		if r.SupportsPrePlan() || r.ForcesDoubleBuffer() {
			return true
		}
	}
	return false
}

// Blocked lists the resources a step of walk uses that cannot be captured,
// as the seed's blocked_capture_resources(step, resources): a resource that
// cannot be captured blocks only the walks whose steps use it.
func (sr *stepRunner) Blocked(walk string) []string {
	var out []string
	for _, r := range sr.stepResources(walk) {
		if !r.CanCapture() {
			out = append(out, r.Name())
		}
	}
	return out
}

// BuildGraphBuffers has every resource claim its per-slot buffers.
func (sr *stepRunner) BuildGraphBuffers(specs []graph.SlotSpec) error {
	for _, r := range sr.res {
		if err := r.BuildGraphBuffers(specs); err != nil {
			return fmt.Errorf("engine: %s: %w", r.Name(), err)
		}
	}
	return nil
}
