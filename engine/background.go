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
	tries   map[bgItem]int
	total   int
	done    int
	started time.Time
	spent   time.Duration // in background units so far
}

// bgShare is the share of the loop's time background capture may take while
// requests are being served; when the engine is idle it takes all of it.
const bgShare = 0.2

// bgItem is a bucket of one runner.
type bgItem struct {
	r *graph.Runner
	k graph.BucketKey
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
	// A capture uses the forward's stream and buffers: no pre-plan may be in
	// flight.
	e.discardPrePlan()
	switch bg.phase {
	case bgWarm:
		if _, more := bg.pools[bg.warm].runner.WarmNext(); !more {
			bg.warm++
			if bg.warm == len(bg.pools) {
				bg.phase = bgPlan
			}
		}
	case bgPlan:
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
				e.log.Error("background capture planning failed; serving eager", "err", err)
				e.bg = nil
				return true
			}
			e.planRep = rep
			for _, p := range rep.Pools {
				planned[p.runner] = p.planned
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
	case bgCapture:
		if len(bg.pending) == 0 {
			for _, p := range bg.pools {
				_ = p.runner.ReleasePadding()
				p.runner.ReleaseWarmed(nil)
			}
			e.bg = nil
			e.captureFinished(bg.started)
			return true
		}
		// The most requested first; the largest among equals.
		bi := 0
		for i, it := range bg.pending {
			if bg.demand[it] > bg.demand[bg.pending[bi]] {
				bi = i
			}
		}
		it := bg.pending[bi]
		err := it.r.CaptureBucket(it.k)
		if errors.Is(err, graph.ErrNotAdmitted) && bg.tries[it] < maxCaptureTries {
			bg.tries[it]++
			return len(e.running) == 0 // busy: let the requests make room first
		}
		if err != nil {
			// Every drop is counted, and said at ERROR: the runner logs
			// the failures it drops itself; a bucket refused for memory
			// too often is dropped here.
			e.stats.bgDropped.Add(1)
			if errors.Is(err, graph.ErrNotAdmitted) {
				e.log.Error("accelerator graph bucket dropped; it will run eager", "bucket", it.k.String(),
					"reason", fmt.Sprintf("refused %d times for memory real requests held: %v", bg.tries[it]+1, err))
			}
		}
		bg.pending = slices.Delete(bg.pending, bi, bi+1)
		bg.done++
		if p := e.opts.Runner.Progress; p != nil {
			p(bg.done, bg.total, graph.SlotSpec{Bucket: it.k}, err)
		}
	}
	return true
}
