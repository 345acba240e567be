package engine

import (
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reprise-ml/reprise/graph"
)

// Stats are the engine's counters, safe to read from any goroutine.
type Stats struct {
	waiting  atomic.Int64
	running  atomic.Int64
	kvUsed   atomic.Int64
	kvFree   atomic.Int64
	tokens   atomic.Int64
	finished atomic.Int64
	// prefillTokens counts the prompt tokens prefill steps carried.
	prefillTokens atomic.Int64

	firstToken atomic.Int64 // ns from Start to the first token served
	captureNS  atomic.Int64 // ns spent sizing, planning and capturing graphs

	prePlans     atomic.Int64
	prePlanHits  atomic.Int64
	prePlanStale atomic.Int64
	bgDropped    atomic.Int64 // buckets background capture dropped

	mu    sync.Mutex
	steps map[stepKey]*StepStats
}

type stepKey struct {
	walk   string
	replay bool
}

// StepStats counts steps of one walk and mode.
type StepStats struct {
	Walk    string        `json:"walk"`
	Replay  bool          `json:"replay"`
	Steps   int64         `json:"steps"`
	Rows    int64         `json:"rows"`
	Total   time.Duration `json:"total_ns"`
	Buckets []int64       `json:"-"` // latency histogram counts, see LatencyBuckets
}

// LatencyBuckets are the upper bounds of the step latency histogram.
var LatencyBuckets = []time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond, time.Millisecond,
	2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, time.Second,
}

func (s *Stats) observeStep(walk string, replay bool, rows int, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.steps == nil {
		s.steps = map[stepKey]*StepStats{}
	}
	k := stepKey{walk, replay}
	st := s.steps[k]
	if st == nil {
		st = &StepStats{Walk: walk, Replay: replay, Buckets: make([]int64, len(LatencyBuckets)+1)}
		s.steps[k] = st
	}
	st.Steps++
	st.Rows += int64(rows)
	st.Total += d
	i := sort.Search(len(LatencyBuckets), func(i int) bool { return d <= LatencyBuckets[i] })
	st.Buckets[i]++
}

// Snapshot is a copy of the engine's counters.
type Snapshot struct {
	Waiting  int64 `json:"waiting"`
	Running  int64 `json:"running"`
	Tokens   int64 `json:"tokens"`
	Finished int64 `json:"finished"`
	// PrefillTokens counts the prompt tokens prefilled (a prompt shared by
	// choices once).
	PrefillTokens int64 `json:"prefill_tokens"`
	PrePlans      int64 `json:"pre_plans"`
	PrePlanHits   int64 `json:"pre_plan_hits"`
	PrePlanStale  int64 `json:"pre_plan_stale"`
	// BackgroundDropped counts the buckets background capture dropped
	// (each also an ERROR line naming it and why).
	BackgroundDropped int64       `json:"background_dropped"`
	KVPagesUsed       int         `json:"kv_pages_used"`
	KVPagesFree       int         `json:"kv_pages_free"`
	Steps             []StepStats `json:"steps"`
	// FirstTokenAfterStart is the time from Start to the first token any
	// request received (0: none yet).
	FirstTokenAfterStart time.Duration `json:"first_token_after_start_ns"`
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Snapshot {
	s := &e.stats
	snap := Snapshot{Waiting: s.waiting.Load(), Running: s.running.Load(), Tokens: s.tokens.Load(), Finished: s.finished.Load(),
		PrefillTokens: s.prefillTokens.Load(),
		PrePlans:      s.prePlans.Load(), PrePlanHits: s.prePlanHits.Load(), PrePlanStale: s.prePlanStale.Load(),
		BackgroundDropped: s.bgDropped.Load(),
		KVPagesUsed:       int(s.kvUsed.Load()), KVPagesFree: int(s.kvFree.Load()),
		FirstTokenAfterStart: time.Duration(s.firstToken.Load())}
	s.mu.Lock()
	for _, st := range s.steps {
		c := *st
		c.Buckets = append([]int64(nil), st.Buckets...)
		snap.Steps = append(snap.Steps, c)
	}
	s.mu.Unlock()
	sort.Slice(snap.Steps, func(i, j int) bool {
		if snap.Steps[i].Walk != snap.Steps[j].Walk {
			return snap.Steps[i].Walk < snap.Steps[j].Walk
		}
		return !snap.Steps[i].Replay && snap.Steps[j].Replay
	})
	return snap
}

// GraphStats is what the engine's graph runners report, for the server's
// health and metrics: they read it here rather than reaching into the
// runners.
type GraphStats struct {
	// Enabled: the engine replays captured graphs (Options.Graphs).
	Enabled bool `json:"enabled"`
	// LiveBuckets counts the buckets captured and live, over every runner.
	LiveBuckets int `json:"live_buckets"`
	// CaptureTime is the time spent sizing, planning and capturing graphs,
	// before serving and in the background.
	CaptureTime time.Duration `json:"capture_ns"`
	// Runners are each runner's telemetry by pool name ("graphs" for whole
	// steps, a region's label), sorted by name.
	Runners []RunnerStats `json:"runners"`
	// Ready is false while the engine cannot serve as it was asked to:
	// graphs are required (Options.Runner.RequireGraphs) and background
	// capture has buckets still to make live, or the engine stopped on its
	// own (Err). NotReady says why.
	Ready    bool   `json:"ready"`
	NotReady string `json:"not_ready,omitempty"`
}

// RunnerStats is one graph runner's telemetry.
type RunnerStats struct {
	Name        string `json:"name"`
	LiveBuckets int    `json:"live_buckets"`
	graph.Telemetry
}

// GraphStats returns the graph runners' telemetry (Enabled false and
// nothing else with graphs off).
func (e *Engine) GraphStats() GraphStats {
	gs := GraphStats{Enabled: e.opts.Graphs, CaptureTime: time.Duration(e.stats.captureNS.Load()), Ready: true}
	if err := e.Err(); err != nil {
		gs.Ready, gs.NotReady = false, "the engine stopped: "+err.Error()
	} else if e.capturing.Load() {
		gs.Ready, gs.NotReady = false, "graphs are required and background capture has not made every bucket live yet"
	}
	runners := e.Runners()
	names := slices.Sorted(maps.Keys(runners))
	for _, n := range names {
		r := runners[n]
		rs := RunnerStats{Name: n, LiveBuckets: len(r.Buckets()), Telemetry: r.Telemetry()}
		gs.LiveBuckets += rs.LiveBuckets
		gs.Runners = append(gs.Runners, rs)
	}
	return gs
}

// captured adds to the time spent on graph capture.
func (s *Stats) captured(d time.Duration) { s.captureNS.Add(int64(d)) }
