package engine

import (
	"errors"
	"fmt"
	"sync"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
	"github.com/reprise-ml/reprise/internal/failpoint"
)

// node is the engine's side of a graph runner: the model and its resources.
type node struct {
	e      *Engine
	model  Model
	sr     *stepRunner
	stager *accel.Stager
	slots  slotSteps
}

func newNode(e *Engine, m Model, sr *stepRunner, st *accel.Stager) *node {
	return &node{e: e, model: m, sr: sr, stager: st}
}

// slotSteps remembers the step last prepared on each graph slot: the step a
// capture's forward (and its warm-ups) reads its plans from. The whole-step
// node and every region node keep one.
type slotSteps struct {
	mu sync.Mutex
	m  map[graph.SlotKey]*Step
}

// prepare admits and plans step through sr and, on a lease, remembers it for
// the lease's slot. A lease for other key info, or fewer rows than the step,
// is ErrLeaseMismatch.
func (p *slotSteps) prepare(sr *stepRunner, s accel.Stream, st *accel.Stager, step *Step) error {
	if l := step.Lease; l != nil && (l.Bucket.Key != step.Key || len(step.Rows) > l.Bucket.BatchSize) {
		return fmt.Errorf("engine: step %s key %q with %d rows on lease %v: %w",
			step.Walk, step.Key, len(step.Rows), l.Bucket, ErrLeaseMismatch)
	}
	if err := sr.Admit(step); err != nil {
		return err
	}
	if err := sr.Plan(s, st, step); err != nil {
		sr.Abort(step)
		return err
	}
	if step.Lease != nil {
		p.mu.Lock()
		if p.m == nil {
			p.m = map[graph.SlotKey]*Step{}
		}
		p.m[step.Lease.SlotKey("")] = step
		p.mu.Unlock()
	}
	return nil
}

// get returns the step last prepared on the lease's slot.
func (p *slotSteps) get(lease *graph.Lease) (*Step, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	step := p.m[lease.SlotKey("")]
	if step == nil {
		return nil, fmt.Errorf("engine: forward on %v slot %d, never prepared", lease.Bucket, lease.Slot)
	}
	return step, nil
}

// notAdmitted marks an admission refusal during a capture as backpressure
// (graph.ErrNotAdmitted) while real requests hold resources: the capture is
// tried again later rather than dropped. With no request open, nothing can
// free what the step lacks: the refusal is final, and says so.
func notAdmitted(sr *stepRunner, err error) error {
	var ae *admitError
	if !errors.As(err, &ae) {
		return err
	}
	if sr.Requests() == 0 {
		return fmt.Errorf("%w, even with the engine idle: the bucket can never be admitted", err)
	}
	return fmt.Errorf("%w: %w", graph.ErrNotAdmitted, err)
}

func (n *node) DoubleBuffer() bool                             { return n.sr.DoubleBuffer() }
func (n *node) Blocked(cfg *graph.Config) []string             { return n.sr.Blocked(cfg.Walk) }
func (n *node) BuildGraphBuffers(specs []graph.SlotSpec) error { return n.sr.BuildGraphBuffers(specs) }

func (n *node) IngestPadding(ids []int64) error {
	for _, id := range ids {
		if err := n.sr.Ingest(id, requestInfo{}); err != nil {
			return err
		}
	}
	return nil
}

func (n *node) ResetPadding(ids []int64, free bool) error { return n.sr.Reset(ids, free) }

// Prepare admits and plans a step on a lease for the runner (captures).
func (n *node) Prepare(s accel.Stream, lease *graph.Lease, rows []graph.Row) (graph.Inputs, error) {
	real := 0
	for real < len(rows) && !graph.IsPadding(rows[real].ID) {
		real++
	}
	step := newStep(lease.Bucket.Walk, lease.Bucket.Key, rows, real, lease)
	if err := n.prepare(s, step); err != nil {
		return nil, notAdmitted(n.sr, err)
	}
	return n.model.Preprocess(step), nil
}

// ErrLeaseMismatch: a step was given a lease for other key info; replaying it
// would silently compute something else.
var ErrLeaseMismatch = errors.New("lease does not match the step")

// prepare admits and plans step, remembering it for its lease's slot.
func (n *node) prepare(s accel.Stream, step *Step) error {
	if err := failpoint.Inject(failpoint.Plan); err != nil {
		return err
	}
	return n.slots.prepare(n.sr, s, n.stager, step)
}

// Forward runs the model on the step last prepared on the lease's slot.
func (n *node) Forward(l *accel.Launcher, lease *graph.Lease, in map[string]accel.Tensor) (map[string]accel.Tensor, error) {
	step, err := n.slots.get(lease)
	if err != nil {
		return nil, err
	}
	b, err := n.e.batch(step, in)
	if err != nil {
		return nil, err
	}
	return n.model.Forward(l, b)
}
