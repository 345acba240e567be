package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/reprise-ml/reprise/graph"
)

// background is capture done by the loop between steps, so the engine serves
// (eagerly) from the start: first every spec is warmed, largest first, which
// sizes the static inputs; then the buckets are planned; then each planned
// bucket is captured, the most requested first, and goes live atomically once
// its golden check passed.
type background struct {
	phase   int
	pending []graph.BucketKey
	demand  map[graph.BucketKey]int
	tries   map[graph.BucketKey]int
	total   int
	done    int
	started time.Time
}

const (
	bgWarm = iota
	bgPlan
	bgCapture
)

// maxCaptureTries bounds how often a bucket's capture is retried when the
// KV cache is too busy to admit its padding rows.
const maxCaptureTries = 50

// want records that a step of this shape ran eager: the bucket that would
// have served it moves up the capture order.
func (bg *background) want(r *graph.Runner, walk string, bs, tokens int) {
	var best *graph.BucketKey
	for i, k := range bg.pending {
		if k.Walk != walk || k.BatchSize < bs || k.Tokens < tokens {
			continue
		}
		if best == nil || k.Tokens < best.Tokens || (k.Tokens == best.Tokens && k.BatchSize < best.BatchSize) {
			best = &bg.pending[i]
		}
	}
	if best != nil {
		bg.demand[*best]++
	}
}

// backgroundStep does one unit of background capture, reporting whether
// there was any to do.
func (e *Engine) backgroundStep(ctx context.Context) bool {
	bg := e.bg
	if bg == nil {
		return false
	}
	r := e.runner
	// A capture uses the runner's stream and buffers: no pre-plan may be in
	// flight.
	e.discardPrePlan()
	switch bg.phase {
	case bgWarm:
		if _, more := r.WarmNext(); !more {
			bg.phase = bgPlan
		}
	case bgPlan:
		planned := map[graph.BucketKey]bool{}
		if e.opts.NoPlan {
			for _, sp := range r.Specs() {
				planned[sp.Bucket] = true
			}
		} else {
			var rep *PlanReport
			var err error
			if planned, rep, err = e.plan(ctx, r); err != nil {
				e.log.Error("background capture planning failed; serving eager", "err", err)
				e.bg = nil
				return true
			}
			e.planRep = rep
		}
		for _, sp := range r.Specs() {
			if planned[sp.Bucket] && sp.Slot == 0 {
				bg.pending = append(bg.pending, sp.Bucket)
			}
		}
		bg.total = len(bg.pending)
		bg.phase = bgCapture
		e.log.Info("background capture planned", "buckets", bg.total)
	case bgCapture:
		if len(bg.pending) == 0 {
			_ = r.ReleasePadding()
			e.bg = nil
			if rep := e.planRep; rep != nil {
				rep.Actual, rep.ActualOutside = r.PoolMemory(), r.OutsideMemory()
			}
			e.log.Info("background capture done", "buckets", len(r.Buckets()), "dropped", len(r.Dropped()),
				"seconds", time.Since(bg.started).Seconds(), "pool_bytes", r.PoolMemory())
			return true
		}
		// The most requested first; the largest among equals.
		bi := 0
		for i, k := range bg.pending {
			if bg.demand[k] > bg.demand[bg.pending[bi]] {
				bi = i
			}
		}
		k := bg.pending[bi]
		err := r.CaptureBucket(k)
		if errors.Is(err, graph.ErrNotAdmitted) && bg.tries[k] < maxCaptureTries {
			bg.tries[k]++
			return len(e.running) == 0 // busy: let the requests make room first
		}
		bg.pending = slices.Delete(bg.pending, bi, bi+1)
		bg.done++
		if p := e.opts.Runner.Progress; p != nil {
			p(bg.done, bg.total, graph.SlotSpec{Bucket: k}, err)
		}
	}
	return true
}
