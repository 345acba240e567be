package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
)

// Graph orchestration: the engine's graph runners (the whole step's and one
// per region), their preparation, planning and capture at start-up or in the
// background, and what the engine tells of them.
// DryPlan makes the graph runner, sizes and plans its captures, and stops
// there: what `reprise plan` prints. The engine cannot be started after.
func (e *Engine) DryPlan(ctx context.Context) (*PlanReport, error) {
	e.opts.BackgroundCapture, e.opts.NoPlan = false, false
	if err := e.startGraphs(ctx, false); err != nil {
		return nil, err
	}
	return e.planRep, nil
}

// startGraphs makes the graph runners (the model's whole-step configs, and
// one per region, sharing the forward's stream), prepares them all before
// any captures, and captures (or, in the background, starts to; or with
// capture false only plans).
func (e *Engine) startGraphs(ctx context.Context, capture bool) error {
	if !e.dev.Capability().GraphCapture {
		return fmt.Errorf("engine: graphs asked for but %v cannot capture: %w", e.dev.Info(), accel.ErrUnsupported)
	}
	ro := e.opts.Runner
	if ro.Name == "" {
		ro.Name = e.info.Name
	}
	ro.Group = e.opts.Group
	// The engine, not each runner, holds graphs to the require switch, so
	// that one error names every bucket of every runner that will not
	// replay.
	ro.RequireGraphs = false
	if ro.Logger == nil {
		ro.Logger = e.log
	}
	if e.opts.BackgroundCapture {
		// Warm-ups between steps must leave the largest step its memory
		// (before serving, the plan keeps it free), and a segment besides:
		// small blocks share segments, so free bytes may be split.
		ro.KeepFree = func() int64 { return e.floor + segment }
	}
	r, err := graph.New(e.dev, e.node, e.model.Configs(), ro)
	if err != nil {
		return err
	}
	t0 := time.Now()
	// Every runner claims its buffers before any captures.
	if _, err := r.Prepare(); err != nil {
		r.Close()
		return err
	}
	e.runner, e.stream = r, r.Stream()
	for _, label := range e.regionLabels() {
		rr := e.regions[label]
		rro := ro
		// A region shares the forward's stream and its graph pool (its
		// outputs live outside the pool, so one region's replay never
		// overwrites another's outputs, DESIGN.md invariant 7): the
		// graphs of a pool replay one at a time, on that stream, and
		// share its scratch.
		rro.Name, rro.Stream, rro.Pool = ro.Name+"/"+label, r.Stream(), r.Pool()
		if rr.runner, err = graph.New(e.dev, rr.node, []*graph.Config{rr.reg.Config}, rro); err != nil {
			return err
		}
		if _, err := rr.runner.Prepare(); err != nil {
			return err
		}
	}
	// Until graphs are captured, the batch cap is the largest decode batch
	// the configs that cap it declare: the floor below is sized for it.
	e.refreshBatchCap()
	// Every buffer a capture reads is claimed: what is left must hold the
	// largest eager step beside the KV cache.
	if err := e.ensureFloor(r.Stream()); err != nil {
		return err
	}
	pools := e.pools()
	captures := 0
	for _, p := range pools {
		captures += len(p.runner.Specs())
	}
	if e.opts.BackgroundCapture {
		if e.opts.Group != nil && e.opts.Group.Size() > 1 {
			return fmt.Errorf("engine: background capture is for a single rank (this group has %d)", e.opts.Group.Size())
		}
		if e.opts.Runner.RequireGraphs {
			// A walk blocked by a resource that cannot be captured is
			// known now: do not start serving at all.
			if err := e.requireGraphs(); err != nil {
				return err
			}
			e.capturing.Store(true)
		}
		e.bg = &background{demand: map[bgItem]int{}, refused: map[bgItem]*refusal{}, started: t0, pools: pools}
		e.log.Info("serving eager while graphs are captured in the background", "captures", captures)
		return nil
	}
	planned := map[*graph.Runner]map[graph.BucketKey]bool{}
	if !e.opts.NoPlan {
		rep, err := e.plan(ctx, pools)
		if err != nil {
			return err
		}
		e.planRep = rep
		for _, p := range rep.Pools {
			planned[p.runner] = p.planned
			p.runner.LeaveOut(p.planned, rep.Plan.Why)
		}
		e.log.Info("capture plan", "buckets", rep.Plan.Count(), "of", rep.Buckets(), "predicted", rep.Plan.Total(),
			"floor", rep.Plan.Floor, "budget", rep.Plan.Free)
	}
	if !capture {
		return nil
	}
	e.log.Info("capturing graphs", "captures", captures)
	for _, p := range pools {
		if err := p.runner.Capture(ctx, planned[p.runner]); err != nil {
			return err
		}
	}
	e.stats.captured(time.Since(t0))
	e.refreshBatchCap()
	e.captureFinished(t0)
	if e.opts.Runner.RequireGraphs {
		return e.requireGraphs()
	}
	return nil
}

// refreshBatchCap sets the decode batch cap (Options.MaxBatch, never above
// what was given) from the graphs, as the seed's max_batch_size_for
// (Runner.MaxBatchSizeFor): the largest decode batch captured by a config
// that caps the eager batch; while background capture has buckets to come,
// those count too. It runs after Prepare, after capture and after each
// background capture, so a bucket dropped or left out lowers it.
func (e *Engine) refreshBatchCap() {
	if e.runner == nil {
		return
	}
	var toCome []graph.BucketKey
	if bg := e.bg; bg != nil && bg.phase == bgCapture {
		for _, it := range bg.pending {
			if it.r == e.runner {
				toCome = append(toCome, it.k)
			}
		}
	}
	m := e.runner.MaxBatchSizeFor(WalkDecode, toCome...)
	e.opts.MaxBatch = e.maxBatch
	if m > 0 && m < e.maxBatch {
		e.opts.MaxBatch = m
	}
}

// requireGraphs is the one error naming every declared bucket of every
// runner that will not replay and why (graph.ErrGraphsRequired), or nil.
func (e *Engine) requireGraphs() error {
	var missing []graph.Unreplayed
	for _, p := range e.pools() {
		if p.runner != nil {
			missing = append(missing, p.runner.Unreplayed()...)
		}
	}
	if err := graph.RequiredError(missing); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	return nil
}

// pool is one graph runner, its name in plans and the name of the graph
// pool it captures into.
type pool struct {
	name      string
	runner    *graph.Runner
	graphPool string
}

// pools lists the engine's runners: the whole-step one, then the regions'
// (which share its graph pool).
func (e *Engine) pools() []pool {
	ps := []pool{{"graphs", e.runner, "graphs"}}
	for _, label := range e.regionLabels() {
		ps = append(ps, pool{label, e.regions[label].runner, "graphs"})
	}
	return ps
}

func (e *Engine) regionLabels() []string { return slices.Sorted(maps.Keys(e.regions)) }

// Runners are the engine's graph runners by pool name: "graphs" for the
// whole-step captures, and one per region (by its label). Empty with graphs
// off.
func (e *Engine) Runners() map[string]*graph.Runner {
	out := map[string]*graph.Runner{}
	for _, p := range e.pools() {
		if p.runner != nil {
			out[p.name] = p.runner
		}
	}
	return out
}

// LiveBuckets counts the buckets every runner has live (captured and
// registered).
func (e *Engine) LiveBuckets() int { return e.liveBuckets() }

// liveBuckets counts the buckets every runner registered.
func (e *Engine) liveBuckets() int {
	n := 0
	for _, p := range e.pools() {
		if p.runner != nil {
			n += len(p.runner.Buckets())
		}
	}
	return n
}

// captureFinished logs the one line an operator looks for once start-up
// capture is over, in the foreground or the background: buckets live, how
// long it took, and the device memory the graphs hold.
func (e *Engine) captureFinished(t0 time.Time) {
	e.reportCapture()
	var mem int64
	seen := map[accel.Pool]bool{}
	for _, p := range e.pools() {
		if p.runner != nil {
			if !seen[p.runner.Pool()] {
				seen[p.runner.Pool()] = true
				mem += p.runner.PoolMemory()
			}
			mem += p.runner.OutsideMemory()
		}
	}
	e.log.Info("capture finished", "buckets_live", e.liveBuckets(), "seconds", fmt.Sprintf("%.2f", time.Since(t0).Seconds()),
		"graph_memory", mem, "graph_memory_mib", fmt.Sprintf("%.1f", float64(mem)/(1<<20)))
}

// reportCapture logs, per pool, the plan's prediction against what capture
// took.
func (e *Engine) reportCapture() {
	rep := e.planRep
	if rep == nil {
		return
	}
	for i := range rep.Pools {
		p := &rep.Pools[i]
		p.Actual, p.ActualOutside = p.runner.PoolMemory(), p.runner.OutsideMemory()
	}
	// Per graph pool: the runners sharing one are summed outside it.
	for _, name := range slices.Sorted(maps.Keys(rep.Plan.Predicted)) {
		var actual, outside int64
		for _, p := range rep.Pools {
			if p.Pool == name {
				actual = p.Actual
				outside += p.ActualOutside
			}
		}
		e.log.Info("capture memory, predicted against taken", "pool", name, "predicted", rep.Plan.Predicted[name],
			"actual", actual, "outside_predicted", rep.Plan.Outside[name], "outside_actual", outside)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := slices.Sorted(maps.Keys(m))
	return ks
}
