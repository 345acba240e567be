package graph

import (
	"fmt"
	"slices"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/internal/failpoint"
)

// SelectBucket is the tightest captured bucket for a step of walk with bs rows
// and tokens input tokens and key info key: among the buckets that may
// replay walk with that key, bs' >= bs and tokens' >= tokens × the config's
// multiplier, the least (tokens', bs'). A walk may have several configs
// (several fixed shapes), so every matching bucket is considered. It returns
// nil when none fits: the step runs eager.
func (r *Runner) SelectBucket(walk string, bs, tokens int, key string) *Bucket {
	r.mu.Lock()
	defer r.mu.Unlock()
	var best *Bucket
	for _, b := range r.byWalk[walk] {
		if b.Key.Key != key || b.Key.BatchSize < bs || b.Key.Tokens < tokens*b.Config.Multiplier() {
			continue
		}
		if best == nil || b.Key.Tokens < best.Key.Tokens ||
			(b.Key.Tokens == best.Key.Tokens && b.Key.BatchSize < best.Key.BatchSize) {
			best = b
		}
	}
	return best
}

// SelectBatchedBucket is a bucket for a batch whose inputs do not exist yet:
// only batched captures can answer, since their token count follows from the
// batch size (a packed capture's depends on the requests). This is what lets
// pre-planning run before the inputs are built. The least (bs', tokens').
func (r *Runner) SelectBatchedBucket(walk string, bs int, key string) *Bucket {
	r.mu.Lock()
	defer r.mu.Unlock()
	var best *Bucket
	for _, b := range r.byWalk[walk] {
		if b.Config.Batched == nil || b.Key.Key != key || b.Key.BatchSize < bs {
			continue
		}
		if best == nil || b.Key.BatchSize < best.Key.BatchSize ||
			(b.Key.BatchSize == best.Key.BatchSize && b.Key.Tokens < best.Key.Tokens) {
			best = b
		}
	}
	return best
}

// LeaseRequest is what an upcoming step asks LeaseSlot for.
type LeaseRequest struct {
	Walk string
	// Key is the step's key info.
	Key string
	// Rows is the step's batch size, Tokens its input tokens.
	Rows, Tokens int
	// AheadOfInputs: the step's inputs are not built yet (pre-plan), so
	// only batched captures can answer (their token count follows from the
	// batch size: SelectBatchedBucket); Tokens is not read.
	AheadOfInputs bool
	// PinSlot leases Slot rather than the bucket's next one: a caller that
	// reserved a slot passes it back so both submissions target it.
	PinSlot bool
	Slot    int
}

// LeaseSlot picks the bucket and double-buffer slot an upcoming step replays
// on, or returns nil (eager). Unless the request pins a slot, it advances the
// bucket's counter so consecutive leases alternate slots. The lease names the
// capture walk, on which resources key their per-slot state.
func (r *Runner) LeaseSlot(req LeaseRequest) *Lease {
	var b *Bucket
	if req.AheadOfInputs {
		b = r.SelectBatchedBucket(req.Walk, req.Rows, req.Key)
	} else {
		b = r.SelectBucket(req.Walk, req.Rows, req.Tokens, req.Key)
	}
	if b == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	slot := req.Slot
	if !req.PinSlot {
		slot = r.counters[b.Key] % r.nslots
		r.counters[b.Key]++
	}
	return &Lease{Bucket: b.Key, Slot: slot % r.nslots, cfg: b.Config, cfgIdx: b.ConfigIdx}
}

// MaxBatchSizeFor is the largest batch walk was captured for, over configs
// that cap the eager batch size, or 0 for no cap. A config that captures only
// an acceleration subset (CapEagerBatch false) does not constrain the batch.
// toCome are declared buckets not captured yet that will be (a background
// capture's queue): they count as captured. A walk left with no graph and
// none to come (none planned, or all dropped) keeps its configs' largest
// batch size as the cap: the batches the model was declared for.
func (r *Runner) MaxBatchSizeFor(walk string, toCome ...BucketKey) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := 0
	for _, b := range r.byWalk[walk] {
		if b.Config.CapEagerBatch {
			m = max(m, b.Key.BatchSize)
		}
	}
	for _, c := range r.configs {
		if !c.CapEagerBatch || !c.Replays(walk) {
			continue
		}
		for _, sh := range c.shapes() {
			if slices.Contains(toCome, BucketKey{Walk: c.Walk, BatchSize: sh[0], Tokens: sh[1], Key: c.KeyInfo}) {
				m = max(m, sh[0])
			}
		}
	}
	if m == 0 {
		for _, c := range r.configs {
			if c.CapEagerBatch && c.Replays(walk) {
				m = max(m, slices.Max(c.BatchSizes))
			}
		}
	}
	return m
}

// canRun reports whether a step of this shape would replay.
func (r *Runner) canRun(walk string, bs, tokens int, key string) bool {
	return r.SelectBucket(walk, bs, tokens, key) != nil
}

// CapturesWalk reports whether any registered capture replays walk.
func (r *Runner) CapturesWalk(walk string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byWalk[walk]) > 0
}

// slotFor is the slot a lease replays.
func (r *Runner) slotFor(l *Lease) (*Slot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buckets[l.Bucket]
	if b == nil || l.Slot < 0 || l.Slot >= len(b.Slots) {
		return nil, fmt.Errorf("graph: %s: no captured %v slot %d", r.name, l.Bucket, l.Slot)
	}
	return b.Slots[l.Slot], nil
}

// PadInputs is rows followed by the slot's padding rows up to the bucket's
// batch size: batched padding rows carry the config's tokens per row (zeros),
// packed ones none, so no new storage is allocated for them.
func (r *Runner) PadInputs(l *Lease, rows []Row) ([]Row, error) {
	s, err := r.slotFor(l)
	if err != nil {
		return nil, err
	}
	if len(rows) > l.Bucket.BatchSize {
		return nil, fmt.Errorf("graph: %d rows for %v", len(rows), l.Bucket)
	}
	out := make([]Row, 0, l.Bucket.BatchSize)
	out = append(out, rows...)
	for _, id := range s.padIDs[len(rows):] {
		var toks []int32
		if l.cfg.Batched != nil {
			toks = make([]int32, l.cfg.Batched.TokensPerRow)
		}
		out = append(out, Row{ID: id, Tokens: toks})
	}
	return out, nil
}

// StepIDs is the padded addressing of a step: the real ids, then the slot's
// padding ids. Plans and commits address real state by its own id; only the
// padding rows use the slot's rows.
func (r *Runner) StepIDs(l *Lease, ids []int64) ([]int64, error) {
	s, err := r.slotFor(l)
	if err != nil {
		return nil, err
	}
	if len(ids) > l.Bucket.BatchSize {
		return nil, fmt.Errorf("graph: %d rows for %v", len(ids), l.Bucket)
	}
	return append(append(make([]int64, 0, l.Bucket.BatchSize), ids...), s.padIDs[len(ids):]...), nil
}

// DeclareInputsFor is the template rows of a declare-only call (pre-plan) for
// the lease's bucket and slot, cached per (bucket, slot): a bucket's shape is
// fixed, each slot has its own padding rows, and
// rebuilding the rows each pre-plan is measurable work. The slice is shared:
// callers must not modify it or pass it to anything that does.
func (r *Runner) DeclareInputsFor(l *Lease) ([]Row, error) {
	s, err := r.slotFor(l)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Keyed by slot: each slot has its own padding rows.
	k := SlotKey{Bucket: l.Bucket, Slot: l.Slot}
	if rows, ok := r.declare[k]; ok {
		return rows, nil
	}
	rows := l.cfg.dummyRows(s.padIDs, l.Bucket.Tokens)
	r.declare[k] = rows
	return rows, nil
}

// RunForward stages a step's preprocessed inputs into the lease's slot and
// replays it on the runner's stream. The replay waits on planDone (the
// pre-plan's event: it wrote this slot's plan buffers on the plan stream).
// It returns the slot's static outputs, valid until the slot's next replay;
// read them after synchronising the stream (or an event recorded on it).
func (r *Runner) RunForward(l *Lease, in Inputs, planDone accel.Event) (map[string]accel.Tensor, error) {
	t0 := time.Now()
	s, err := r.slotFor(l)
	if err != nil {
		return nil, err
	}
	for _, name := range s.inputKeys {
		h, ok := in[name]
		if !ok {
			return nil, fmt.Errorf("graph: %v: step has no input %q", l.Bucket, name)
		}
		if err := r.stage(r.stream, s.static[name], h); err != nil {
			return nil, fmt.Errorf("graph: %v: input %q: %w", l.Bucket, name, err)
		}
	}
	if planDone != nil {
		if err := r.stream.Wait(planDone); err != nil {
			return nil, err
		}
	}
	if err := failpoint.Inject(failpoint.Replay); err != nil {
		return nil, err
	}
	if err := s.exec.Launch(r.stream); err != nil {
		return nil, err
	}
	r.tele.replay(l.Bucket, time.Since(t0))
	return s.outputs, nil
}

// Release returns the step's padding rows (those past realBS) to rest.
// Padding rows run against the sink, so nothing stays resident: padding never
// competes with real requests for storage.
func (r *Runner) Release(l *Lease, realBS int) error {
	s, err := r.slotFor(l)
	if err != nil {
		return err
	}
	if realBS > len(s.padIDs) {
		realBS = len(s.padIDs)
	}
	r.tele.release(l.Bucket, realBS, l.Bucket.BatchSize-realBS)
	return r.pad.Reset(s.padIDs[realBS:], false)
}

// Discard returns the padding rows of a lease that will not run (a stale
// pre-plan) to rest, without counting it as served.
func (r *Runner) Discard(l *Lease) error {
	s, err := r.slotFor(l)
	if err != nil {
		return err
	}
	return r.pad.Reset(s.padIDs, false)
}
