package engine

import (
	"errors"
	"fmt"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
)

// The floor is the memory the largest eager steps take beside everything the
// engine holds: a decode of MaxBatch rows and a prefill of MaxPrefillRows
// prompts carrying MaxPrefillTokens tokens. Start runs both once, eagerly, on
// padding rows at rest (they hold no KV pages), before it serves: a server
// that starts can always run its largest step. When they do not fit beside an
// automatically sized KV cache the cache is made smaller; when they do not
// fit at all, or beside a cache of a given size, Start fails saying how much
// memory is needed.

// probeSteps are the shapes of the largest eager steps: a walk and each row's
// token count.
func (e *Engine) probeSteps() []struct {
	walk   string
	tokens []int
} {
	decode := make([]int, e.opts.MaxBatch)
	for i := range decode {
		decode[i] = 1
	}
	rows := max(1, min(e.opts.MaxPrefillRows, e.opts.MaxPrefillTokens))
	prefill := make([]int, rows)
	for i := range prefill {
		prefill[i] = e.opts.MaxPrefillTokens / rows
	}
	prefill[0] += e.opts.MaxPrefillTokens % rows
	return []struct {
		walk   string
		tokens []int
	}{{WalkDecode, decode}, {WalkPrefill, prefill}}
}

// probeFloor runs the largest eager steps on s and returns the most any of
// them allocated at once.
func (e *Engine) probeFloor(s accel.Stream) (int64, error) {
	steps := e.probeSteps()
	n := 0
	for _, st := range steps {
		n = max(n, len(st.tokens))
	}
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = graph.PaddingHandle(fmt.Sprintf("engine/floor/%d", i))
	}
	if err := e.node.IngestPadding(ids); err != nil {
		return 0, err
	}
	defer func() {
		for _, id := range ids {
			_ = e.sr.Remove(id)
		}
	}()
	// Regions run inline: the probe is the eager step, and counts no
	// fallback in any runner's telemetry.
	e.forceEager = true
	defer func() { e.forceEager = false }()
	var floor int64
	for _, st := range steps {
		rows := make([]graph.Row, len(st.tokens))
		for i, t := range st.tokens {
			rows[i] = graph.Row{ID: ids[i], Tokens: make([]int32, t)}
		}
		if err := s.Synchronize(); err != nil {
			return 0, err
		}
		a := e.dev.Allocator()
		a.ResetPeak()
		base := a.Stats().Allocated
		if err := e.probeStep(s, st.walk, rows); err != nil {
			return 0, fmt.Errorf("the largest eager %s step (%d rows, %d tokens): %w", st.walk, len(rows), sumTokens(rows), err)
		}
		floor = max(floor, a.Stats().PeakAllocated-base)
	}
	return floor, nil
}

func (e *Engine) probeStep(s accel.Stream, walk string, rows []graph.Row) error {
	step := newStep(walk, "", rows, len(rows), nil)
	if err := e.node.prepare(s, step); err != nil {
		return err
	}
	defer e.sr.Abort(step)
	outs, err := e.eagerForward(s, step, e.model.Preprocess(step))
	l := accel.On(s)
	l.Free(mapTensors(outs)...)
	err = errors.Join(err, l.Err(), e.sr.Finish(step))
	return errors.Join(err, s.Synchronize())
}

func sumTokens(rows []graph.Row) int {
	n := 0
	for _, r := range rows {
		n += len(r.Tokens)
	}
	return n
}

// ErrTooLittleMemory: the device cannot hold the model's largest step beside
// what the engine keeps.
var ErrTooLittleMemory = errors.New("too little device memory")

// ensureFloor makes sure the largest eager steps fit beside the KV cache,
// shrinking an automatically sized cache if they do not, and records the
// floor. It runs before any step is served.
func (e *Engine) ensureFloor(s accel.Stream) error {
	floor, err := e.probeFloor(s)
	if err == nil {
		e.floor = floor
		return nil
	}
	if !errors.Is(err, accel.ErrOutOfMemory) {
		return fmt.Errorf("engine: %w", err)
	}
	// Measure the floor beside the smallest cache, then give the cache what
	// is left.
	had := e.kv.Config().Pages
	if rerr := e.kv.resize(e.dev, 2); rerr != nil {
		return fmt.Errorf("engine: %w", rerr)
	}
	floor, ferr := e.probeFloor(s)
	if ferr != nil {
		if errors.Is(ferr, accel.ErrOutOfMemory) {
			return fmt.Errorf("engine: %w: %w, even beside an empty KV cache: %s", ErrTooLittleMemory, ferr, e.memoryNeeded(had, 0))
		}
		return fmt.Errorf("engine: %w", ferr)
	}
	if e.opts.KVPages != 0 {
		return fmt.Errorf("engine: %w: %w beside the KV cache of %d pages: %s", ErrTooLittleMemory, err, had, e.memoryNeeded(had, floor))
	}
	pageBytes := e.kv.PageBytes()
	free := e.freeMemory() + e.kv.Bytes()
	pages := int((free - floor - segment) / pageBytes)
	if pages < 2 {
		return fmt.Errorf("engine: %w: the largest step takes %d bytes, leaving no KV page: %s", ErrTooLittleMemory, floor, e.memoryNeeded(2, floor))
	}
	// The allocator rounds to segments and packs small blocks together, so
	// the estimate may be a little over: step down until the steps run.
	for pages = min(pages, had); ; pages -= max(1, pages/8) {
		if pages < 2 {
			return fmt.Errorf("engine: %w: the largest step takes %d bytes, leaving no KV page: %s", ErrTooLittleMemory, floor, e.memoryNeeded(2, floor))
		}
		if rerr := e.kv.resize(e.dev, pages); rerr != nil {
			return fmt.Errorf("engine: %w", rerr)
		}
		_, err := e.probeFloor(s)
		if err == nil {
			break
		}
		if !errors.Is(err, accel.ErrOutOfMemory) {
			return fmt.Errorf("engine: %w", err)
		}
	}
	e.floor = floor
	e.log.Warn("KV cache made smaller so that the largest step fits beside it", "kv_pages", pages, "was", had,
		"floor", floor, "kv_bytes", e.kv.Bytes())
	return nil
}

// segment is the allocator's small-block segment: what rounding the floor up
// may cost.
const segment = 2 << 20

// freeMemory is what eager steps may take now: the device's free memory plus
// what the allocator caches unused outside graph pools.
func (e *Engine) freeMemory() int64 {
	st := e.dev.Allocator().Stats()
	cached := (st.Reserved - st.PoolReserved) - (st.Allocated - st.PoolAllocated)
	return e.dev.MemInfo().Free + cached
}

// memoryNeeded says how much device memory a cache of pages and a floor
// need beside what is in use.
func (e *Engine) memoryNeeded(pages int, floor int64) string {
	mi := e.dev.MemInfo()
	used := mi.Total - e.freeMemory() - e.kv.Bytes()
	need := used + int64(pages)*e.kv.PageBytes() + floor + segment
	s := fmt.Sprintf("the device has %d bytes; about %d are needed (%d in use, a KV cache of %d pages %d, the largest step",
		mi.Total, need, used, pages, int64(pages)*e.kv.PageBytes())
	if floor > 0 {
		return s + fmt.Sprintf(" %d): give the device more memory, or lower the KV pages or the batch", floor)
	}
	return s + " more than what is left): give the device more memory, or lower the batch"
}
