package engine

import (
	"errors"
	"fmt"
	"sync"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
)

// node is the engine's side of a graph runner: the model and its resources.
type node struct {
	e      *Engine
	model  Model
	sr     *StepRunner
	stager *accel.Stager

	mu       sync.Mutex
	prepared map[graph.SlotKey]*Step // the step last prepared on each slot
}

func newNode(e *Engine, m Model, sr *StepRunner, st *accel.Stager) *node {
	return &node{e: e, model: m, sr: sr, stager: st, prepared: map[graph.SlotKey]*Step{}}
}

func (n *node) DoubleBuffer() bool                             { return n.sr.DoubleBuffer() }
func (n *node) Blocked(*graph.Config) []string                 { return n.sr.Blocked() }
func (n *node) BuildGraphBuffers(specs []graph.SlotSpec) error { return n.sr.BuildGraphBuffers(specs) }

func (n *node) IngestPadding(ids []int64) error {
	for _, id := range ids {
		if err := n.sr.Ingest(id, RequestInfo{}); err != nil {
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
	step := NewStep(lease.Bucket.Walk, lease.Bucket.Key, rows, real, lease)
	if err := n.prepare(s, step); err != nil {
		var ae *AdmitError
		if errors.As(err, &ae) {
			// The cache is busy with real requests: try again later.
			return nil, fmt.Errorf("%w: %w", graph.ErrNotAdmitted, err)
		}
		return nil, err
	}
	return n.model.Preprocess(step), nil
}

// ErrLeaseMismatch: a step was given a lease for other key info; replaying it
// would silently compute something else.
var ErrLeaseMismatch = errors.New("lease does not match the step")

// prepare admits and plans step, remembering it for its lease's slot.
func (n *node) prepare(s accel.Stream, step *Step) error {
	if l := step.Lease; l != nil && (l.Bucket.Key != step.Key || len(step.Rows) > l.Bucket.BatchSize) {
		return fmt.Errorf("engine: step %s key %q with %d rows on lease %v: %w",
			step.Walk, step.Key, len(step.Rows), l.Bucket, ErrLeaseMismatch)
	}
	if err := n.sr.Admit(step); err != nil {
		return err
	}
	if err := n.sr.Plan(s, n.stager, step); err != nil {
		n.sr.Abort(step)
		return err
	}
	if step.Lease != nil {
		n.mu.Lock()
		n.prepared[step.Lease.SlotKey("")] = step
		n.mu.Unlock()
	}
	return nil
}

// Forward runs the model on the step last prepared on the lease's slot.
func (n *node) Forward(l *accel.Launcher, lease *graph.Lease, in map[string]accel.Tensor) (map[string]accel.Tensor, error) {
	n.mu.Lock()
	step := n.prepared[lease.SlotKey("")]
	n.mu.Unlock()
	if step == nil {
		return nil, fmt.Errorf("engine: forward on %v slot %d, never prepared", lease.Bucket, lease.Slot)
	}
	return n.model.Forward(l, n.e.batch(step, in))
}
