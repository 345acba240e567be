package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/reprise-ml/reprise/graph"
	"github.com/reprise-ml/reprise/internal/cputime"
)

// DecodeBench is what BenchDecode measured for one batch size and mode.
type DecodeBench struct {
	BatchSize int           `json:"batch_size"`
	Replay    bool          `json:"replay"` // steps replayed a graph (else eager)
	Steps     int           `json:"steps"`  // steps timed
	Median    time.Duration `json:"median_ns"`
	Min       time.Duration `json:"min_ns"`
	// CPU is the least process CPU time (user and system, every thread)
	// a timed step took; 0 where the platform does not report it. With
	// one kernel thread (REPRISE_CPU_THREADS=1) no worker waits on
	// another, so it is the step's work, however loaded the machine.
	CPU time.Duration `json:"cpu_min_ns"`
}

// BenchDecode times decode steps of bs rows: it opens bs requests, prefills
// them, runs warmup steps, then times steps (each the whole engine step:
// plan, stage, launch or replay, read back) until it has at least steps of
// them or maxTime has passed (at least 3). eager forces the eager path even
// where a graph was captured. It runs on the engine's loop, between requests'
// steps, and returns the per-step figures.
func (e *Engine) BenchDecode(ctx context.Context, bs, warmup, steps int, maxTime time.Duration, eager bool) (DecodeBench, error) {
	var res DecodeBench
	var ferr error
	err := e.do(ctx, func() { res, ferr = e.benchDecode(bs, warmup, steps, maxTime, eager, BenchVariant{}) })
	if err != nil {
		return res, err
	}
	return res, ferr
}

// BenchDecodeLogProbs is BenchDecode with every request asking for log
// probabilities and 5 alternatives (the KeyLogProbs variant).
func (e *Engine) BenchDecodeLogProbs(ctx context.Context, bs, warmup, steps int, maxTime time.Duration) (DecodeBench, error) {
	var res DecodeBench
	var ferr error
	err := e.do(ctx, func() { res, ferr = e.benchDecode(bs, warmup, steps, maxTime, false, BenchVariant{LogProbs: true}) })
	if err != nil {
		return res, err
	}
	return res, ferr
}

// BenchVariant is what every request of a BenchDecodeRounds set asks for.
type BenchVariant struct {
	// LogProbs asks for log probabilities and 5 alternatives.
	LogProbs bool
	// Penalties asks for a repetition, presence and frequency penalty, a
	// logit bias of 8 tokens, min_p (with Temperature) and min_tokens.
	Penalties bool
	// Temperature samples (seeded per request); 0 is greedy.
	Temperature float32
}

func (e *Engine) benchDecode(bs, warmup, steps int, maxTime time.Duration, eager bool, v BenchVariant) (DecodeBench, error) {
	res := DecodeBench{BatchSize: bs}
	e.discardPrePlan()
	need := 2 + warmup + steps
	if need > e.info.MaxSeq {
		return res, fmt.Errorf("engine: %d bench steps exceed the model's %d positions", warmup+steps, e.info.MaxSeq)
	}
	if eager {
		e.forceEager = true
		defer func() { e.forceEager = false }()
	}
	reqs, err := e.openBench(bs, need, v)
	if err != nil {
		return res, err
	}
	defer e.benchCleanup(reqs)
	set := &benchSet{reqs: reqs, rows: make([]graph.Row, bs), last: make([]int32, bs)}
	var times []time.Duration
	t0 := time.Now()
	for i := 0; i < warmup+steps; i++ {
		d, cd, err := e.benchStep(set, reqs)
		if err != nil {
			return res, err
		}
		if i >= warmup {
			if len(times) == 0 || cd < res.CPU {
				res.CPU = cd
			}
			times = append(times, d)
			if len(times) >= steps || (time.Since(t0) > maxTime && len(times) >= 3) {
				break
			}
		}
	}
	e.discardPrePlan()
	slices.Sort(times)
	res.Steps, res.Median, res.Min = len(times), times[len(times)/2], times[0]
	res.Replay = !eager && e.runner != nil && e.runner.SelectBatchedBucket(WalkDecode, bs, samplingKey(reqs)) != nil
	return res, nil
}

// DecodeSteps are one variant's steps timed by BenchDecodeRounds.
type DecodeSteps struct {
	// Replay: the steps replayed a graph (else eager).
	Replay bool
	// Wall and CPU are each timed step's wall time and process CPU time
	// (user and system, every thread; 0 where the platform does not report
	// it), step s of round r at r*steps+s.
	Wall, CPU []time.Duration
}

// BenchDecodeRounds times replayed decode steps of bs rows for each of vs,
// alternating: it opens bs requests for each variant (each set asking for
// its variant), prefills every set, runs warmup steps of each, then rounds
// rounds, each of steps steps of every set in turn, each step's next set
// pre-planned as in serving. Load from elsewhere on the machine then
// weighs alike on the variants of one round, which are a few steps apart,
// so per-round comparisons hold where figures from separate runs do not.
// The sets are open together: their requests must fit the engine (KV
// pages, and MaxBatch penalty rows: at most one set per bs rows of
// Options.MaxBatch may ask for penalties).
func (e *Engine) BenchDecodeRounds(ctx context.Context, bs, warmup, rounds, steps int, vs []BenchVariant) ([]DecodeSteps, error) {
	var res []DecodeSteps
	var ferr error
	err := e.do(ctx, func() { res, ferr = e.benchDecodeRounds(bs, warmup, rounds, steps, vs) })
	if err != nil {
		return res, err
	}
	return res, ferr
}

// openBench opens bs requests asking for v, for need tokens each, and
// prefills them.
func (e *Engine) openBench(bs, need int, v BenchVariant) ([]*request, error) {
	top := 0
	if v.LogProbs {
		top = 5
	}
	reqs := make([]*request, bs)
	for i := range reqs {
		e.mu.Lock()
		id := e.nextID
		e.nextID++
		e.mu.Unlock()
		r := &request{id: id, req: Request{Prompt: []int32{1, int32(3 + i%200)}, MaxTokens: need, LogProbs: v.LogProbs, TopLogProbs: top,
			Sampling: Sampling{Temperature: v.Temperature, TopP: 1, Seed: uint64(i)}}, maxLen: need + 1,
			out: make(chan Output, 1), wake: func() {}}
		if v.Penalties {
			bias := map[int32]float32{}
			for k := range 8 {
				bias[int32((i*8+k)%e.info.Vocab)] = float32(k) - 4
			}
			r.req.Penalties = Penalties{Repetition: 1.1, Presence: 0.3, Frequency: 0.2, LogitBias: bias, MinP: 0.05, MinTokens: 2}
		}
		if err := e.sr.Ingest(id, e.requestInfo(r)); err != nil {
			e.benchCleanup(reqs[:i])
			return nil, fmt.Errorf("engine: bench batch %d: %w", bs, err)
		}
		r.ingested = true
		reqs[i] = r
	}
	rows := make([]graph.Row, bs)
	for i, r := range reqs {
		rows[i] = graph.Row{ID: r.id, Tokens: r.req.Prompt}
	}
	// Prefill in chunks the prefill limits allow.
	for lo := 0; lo < bs; lo += e.opts.MaxPrefillRows {
		hi := min(bs, lo+e.opts.MaxPrefillRows)
		if _, err := e.runStep(WalkPrefill, rows[lo:hi], reqs[lo:hi], nil); err != nil {
			e.benchCleanup(reqs)
			return nil, err
		}
	}
	return reqs, nil
}

// benchSet is one variant's open requests and their last tokens.
type benchSet struct {
	reqs []*request
	rows []graph.Row
	last []int32
}

// step runs one decode step of the set (next pre-planned after it) and
// returns its wall and CPU time.
func (e *Engine) benchStep(s *benchSet, next []*request) (time.Duration, time.Duration, error) {
	for j, r := range s.reqs {
		s.rows[j] = graph.Row{ID: r.id, Tokens: []int32{3 + s.last[j]%200}}
	}
	ts, cs := time.Now(), cputime.Process()
	toks, err := e.runStep(WalkDecode, s.rows, s.reqs, next)
	if err != nil {
		return 0, 0, err
	}
	d, cd := time.Since(ts), cputime.Process()-cs
	copy(s.last, toks)
	return d, cd, nil
}

func (e *Engine) benchDecodeRounds(bs, warmup, rounds, steps int, vs []BenchVariant) ([]DecodeSteps, error) {
	e.discardPrePlan()
	defer e.discardPrePlan()
	if e.runner == nil {
		return nil, fmt.Errorf("engine: a bench of replayed steps, but no graphs")
	}
	need := 2 + warmup + rounds*steps
	if need > e.info.MaxSeq {
		return nil, fmt.Errorf("engine: %d bench steps exceed the model's %d positions", warmup+rounds*steps, e.info.MaxSeq)
	}
	sets := make([]*benchSet, len(vs))
	defer func() {
		for _, s := range sets {
			if s != nil {
				e.benchCleanup(s.reqs)
			}
		}
	}()
	for i, v := range vs {
		reqs, err := e.openBench(bs, need, v)
		if err != nil {
			return nil, err
		}
		sets[i] = &benchSet{reqs: reqs, rows: make([]graph.Row, bs), last: make([]int32, bs)}
	}
	res := make([]DecodeSteps, len(vs))
	// Every step pre-plans the one after it, as serving does: the next
	// set's at the end of a set's turn.
	order := make([]int, 0, len(vs)*(warmup+rounds*steps))
	for i := range vs {
		for range warmup {
			order = append(order, i)
		}
	}
	for range rounds {
		for i := range vs {
			for range steps {
				order = append(order, i)
			}
		}
	}
	for k, i := range order {
		var next []*request
		if k+1 < len(order) {
			next = sets[order[k+1]].reqs
		}
		d, cd, err := e.benchStep(sets[i], next)
		if err != nil {
			return nil, err
		}
		if k >= len(vs)*warmup {
			res[i].Wall, res[i].CPU = append(res[i].Wall, d), append(res[i].CPU, cd)
		}
	}
	for i, s := range sets {
		res[i].Replay = e.runner.SelectBatchedBucket(WalkDecode, bs, samplingKey(s.reqs)) != nil
	}
	return res, nil
}

func (e *Engine) benchCleanup(reqs []*request) {
	e.discardPrePlan()
	for _, r := range reqs {
		if r != nil && r.ingested {
			_ = e.sr.Remove(r.id)
		}
	}
}

// PrefillResult is one prefill step run by Prefill.
type PrefillResult struct {
	// Next is each prompt's sampled token.
	Next []int32
	// Logits are each prompt's last-position logits, when the model outputs
	// them (its OutputLogits output).
	Logits [][]float32
	// Duration is the step's wall time (plan, forward, read back).
	Duration time.Duration
	// Replayed reports whether a graph served (part of) the step.
	Replayed bool
}

// Prefill runs one prefill step of the given prompts (greedy) and drops the
// requests: for tests and benchmarks. eager forces the eager path.
func (e *Engine) Prefill(ctx context.Context, prompts [][]int32, eager bool) (PrefillResult, error) {
	var res PrefillResult
	var ferr error
	err := e.do(ctx, func() { res, ferr = e.prefillOnce(prompts, eager) })
	if err != nil {
		return res, err
	}
	return res, ferr
}

func (e *Engine) prefillOnce(prompts [][]int32, eager bool) (PrefillResult, error) {
	var res PrefillResult
	e.discardPrePlan()
	reqs := make([]*request, 0, len(prompts))
	rows := make([]graph.Row, len(prompts))
	for i, p := range prompts {
		req := Request{Prompt: p, MaxTokens: 1}
		if err := e.Validate(req); err != nil {
			return res, err
		}
		e.mu.Lock()
		id := e.nextID
		e.nextID++
		e.mu.Unlock()
		if err := e.sr.Ingest(id, requestInfo{MaxLen: len(p)}); err != nil {
			return res, err
		}
		reqs = append(reqs, &request{id: id, ingested: true})
		rows[i] = graph.Row{ID: id, Tokens: p}
	}
	defer e.benchCleanup(reqs)
	e.forceEager, e.keepLogits = eager, true
	defer func() { e.forceEager, e.keepLogits = false, false }()
	before := e.replays()
	t0 := time.Now()
	next, err := e.runStep(WalkPrefill, rows, reqs, nil)
	res.Duration = time.Since(t0)
	if err != nil {
		return res, err
	}
	res.Next = next
	res.Replayed = e.replays() > before
	if lg := e.lastLogits; lg != nil {
		v := len(lg) / len(prompts)
		for i := range prompts {
			res.Logits = append(res.Logits, lg[i*v:(i+1)*v])
		}
	}
	return res, nil
}

// replays counts the replays of every runner.
func (e *Engine) replays() int64 {
	var n int64
	for _, p := range e.pools() {
		if p.runner == nil {
			continue
		}
		for _, b := range p.runner.Telemetry().Buckets {
			n += b.Replays
		}
	}
	return n
}
