package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/reprise-ml/reprise/graph"
)

// background is capture done by the loop between steps, so the engine serves
// (eagerly) from the start: first every spec of every runner is warmed,
// largest first, which sizes the static inputs; then the buckets are planned;
// then each planned bucket is captured, the most requested first, and goes
// live atomically once its golden check passed.
type background struct {
	pools   []pool
	phase   int
	warm    int // the runner being warmed
	pending []bgItem
	demand  map[bgItem]int
	// refused are the buckets, and runners' next warm-ups, refused for
	// memory and not passed since.
	refused map[bgItem]*refusal
	units   int // background units run: the clock back-off counts in
	total   int
	done    int
	started time.Time
	spent   time.Duration // in background units so far
}

// bgShare is the share of the loop's time background capture may take while
// requests are being served; when the engine is idle it takes all of it.
const bgShare = 0.2

// bgItem is a bucket of one runner; with no bucket (the zero key), the
// runner's next warm-up.
type bgItem struct {
	r *graph.Runner
	k graph.BucketKey
}

// warmItem is r's next warm-up.
func warmItem(r *graph.Runner) bgItem { return bgItem{r: r} }

const (
	bgWarm = iota
	bgPlan
	bgCapture
)

// refusal is a bucket's capture, or a warm-up, refused for memory
// (graph.ErrNotAdmitted: real requests hold what its padding rows need):
// how often, and when it is tried again: at background unit at, or as soon
// as a request has released what it held since the last refusal
// (stepRunner.Released moved on), whichever comes first.
type refusal struct {
	tries    int
	at       int
	released uint64
}

// maxBackoff bounds the back-off, in background units (about one a step
// while requests are served): a refused bucket waits 1, 2, 4, ... units,
// then at most this many, between tries.
const maxBackoff = 64

// backoffFor is the wait after a bucket's n-th refusal: doubling from one
// unit, bounded by maxBackoff.
func backoffFor(n int) int {
	if n > 7 {
		return maxBackoff
	}
	return min(1<<(n-1), maxBackoff)
}

// ready reports whether it may be tried now: not refused, its back-off
// over, or memory released since its refusal.
func (bg *background) ready(it bgItem, released uint64) bool {
	f := bg.refused[it]
	return f == nil || bg.units >= f.at || released != f.released
}

// refuse records a refusal for memory of it, released being what the
// step runner had released by then: it backs off.
func (bg *background) refuse(it bgItem, released uint64) {
	f := bg.refused[it]
	if f == nil {
		f = &refusal{}
		bg.refused[it] = f
	}
	f.tries++
	f.at, f.released = bg.units+backoffFor(f.tries), released
}

// want records that a step of this shape ran eager: the bucket that would
// have served it moves up the capture order.
func (bg *background) want(r *graph.Runner, walk string, bs, tokens int) {
	best := -1
	for i, it := range bg.pending {
		k := it.k
		if it.r != r || k.Walk != walk || k.BatchSize < bs || k.Tokens < tokens {
			continue
		}
		if b := bg.pending[max(best, 0)].k; best < 0 || k.Tokens < b.Tokens || (k.Tokens == b.Tokens && k.BatchSize < b.BatchSize) {
			best = i
		}
	}
	if best >= 0 {
		bg.demand[bg.pending[best]]++
	}
}

// backgroundStep does one unit of background capture, reporting whether
// there was any to do. While requests are served, it runs only while
// background work has taken less than bgShare of the time since it began, so
// that serving keeps most of the loop (a unit is a warm-up, a plan or one
// bucket's capture, up to a few forwards).
func (e *Engine) backgroundStep(ctx context.Context) bool {
	bg := e.bg
	if bg == nil {
		return false
	}
	busy := len(e.running) > 0 || len(e.waiting) > 0
	if busy && bg.spent > time.Duration(bgShare*float64(time.Since(bg.started))) {
		return false
	}
	t0 := time.Now()
	defer func() {
		bg.spent += time.Since(t0)
		e.stats.captured(time.Since(t0))
	}()
	return e.backgroundUnit(ctx)
}

func (e *Engine) backgroundUnit(ctx context.Context) bool {
	bg := e.bg
	bg.units++
	switch bg.phase {
	case bgWarm:
		// A warm-up refused for memory backs off as a capture does.
		r := bg.pools[bg.warm].runner
		released := e.sr.Released()
		if !bg.ready(warmItem(r), released) {
			return false
		}
		// A warm-up uses the forward's stream and buffers too.
		e.discardPrePlan()
		_, more := r.WarmNext()
		if r.WarmDeferred() {
			bg.refuse(warmItem(r), released)
			return true
		}
		delete(bg.refused, warmItem(r))
		if !more {
			bg.warm++
			if bg.warm == len(bg.pools) {
				bg.phase = bgPlan
			}
		}
	case bgPlan:
		// Sizing captures on the forward's stream.
		e.discardPrePlan()
		planned := map[*graph.Runner]map[graph.BucketKey]bool{}
		if e.opts.NoPlan {
			for _, p := range bg.pools {
				planned[p.runner] = map[graph.BucketKey]bool{}
				for _, sp := range p.runner.Specs() {
					planned[p.runner][sp.Bucket] = true
				}
			}
		} else {
			rep, err := e.plan(ctx, bg.pools)
			if err != nil {
				e.bg = nil
				if e.opts.Runner.RequireGraphs {
					e.fail(fmt.Errorf("engine: background capture planning failed: %w (%w)", err, graph.ErrGraphsRequired))
					return true
				}
				e.log.Error("background capture planning failed; serving eager", "err", err)
				return true
			}
			e.planRep = rep
			for _, p := range rep.Pools {
				planned[p.runner] = p.planned
				p.runner.LeaveOut(p.planned, rep.Plan.Why)
			}
		}
		for _, p := range bg.pools {
			p.runner.ReleaseWarmed(planned[p.runner])
			for _, sp := range p.runner.Specs() {
				if planned[p.runner][sp.Bucket] && sp.Slot == 0 {
					bg.pending = append(bg.pending, bgItem{p.runner, sp.Bucket})
				}
			}
		}
		bg.total = len(bg.pending)
		bg.phase = bgCapture
		e.log.Info("background capture planned", "buckets", bg.total)
		if e.opts.Runner.RequireGraphs {
			// Buckets the plan left out will never replay.
			if err := e.requireGraphs(); err != nil {
				e.bg = nil
				e.fail(err)
				return true
			}
		}
		e.refreshBatchCap()
	case bgCapture:
		if len(bg.pending) == 0 {
			for _, p := range bg.pools {
				_ = p.runner.ReleasePadding()
				p.runner.ReleaseWarmed(nil)
			}
			e.bg = nil
			e.refreshBatchCap()
			e.capturing.Store(false)
			e.captureFinished(bg.started)
			return true
		}
		// The most requested first; the largest among equals. A bucket
		// refused for memory waits out its back-off, or until memory was
		// released.
		released := e.sr.Released()
		bi := -1
		for i, it := range bg.pending {
			if bg.ready(it, released) && (bi < 0 || bg.demand[it] > bg.demand[bg.pending[bi]]) {
				bi = i
			}
		}
		if bi < 0 {
			return false // every bucket waits for memory to free
		}
		it := bg.pending[bi]
		// A capture uses the forward's stream and buffers: no pre-plan may
		// be in flight.
		e.discardPrePlan()
		err := it.r.CaptureBucket(it.k)
		if errors.Is(err, graph.ErrNotAdmitted) {
			// Real requests hold the memory; they will release it when
			// they end. A bucket that could never be admitted is refused
			// for good once no request is open (the node says so), and
			// dropped below.
			bg.refuse(it, released)
			return true
		}
		if err != nil {
			// Every drop is counted, and said at ERROR (the runner logs
			// the failures it drops).
			e.stats.bgDropped.Add(1)
		}
		bg.pending = slices.Delete(bg.pending, bi, bi+1)
		bg.done++
		if p := e.opts.Runner.Progress; p != nil {
			p(bg.done, bg.total, graph.SlotSpec{Bucket: it.k}, err)
		}
		if err != nil && e.opts.Runner.RequireGraphs {
			e.bg = nil
			e.fail(e.requireGraphs())
			return true
		}
		e.refreshBatchCap()
	}
	return true
}
