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

// BenchVariant is what every request of a BenchDecodeVariant asks for.
type BenchVariant struct {
	// LogProbs asks for log probabilities and 5 alternatives.
	LogProbs bool
	// Penalties asks for a repetition, presence and frequency penalty, a
	// logit bias of 8 tokens, min_p (with Temperature) and min_tokens.
	Penalties bool
	// Temperature samples (seeded per request); 0 is greedy.
	Temperature float32
}

// BenchDecodeVariant is BenchDecode (replayed) with every request asking
// for v.
func (e *Engine) BenchDecodeVariant(ctx context.Context, bs, warmup, steps int, maxTime time.Duration, v BenchVariant) (DecodeBench, error) {
	var res DecodeBench
	var ferr error
	err := e.do(ctx, func() { res, ferr = e.benchDecode(bs, warmup, steps, maxTime, false, v) })
	if err != nil {
		return res, err
	}
	return res, ferr
}

func (e *Engine) benchDecode(bs, warmup, steps int, maxTime time.Duration, eager bool, v BenchVariant) (DecodeBench, error) {
	logprobs := v.LogProbs
	res := DecodeBench{BatchSize: bs}
	e.discardPrePlan()
	need := 2 + warmup + steps
	if need > e.info.MaxSeq {
		return res, fmt.Errorf("engine: %d bench steps exceed the model's %d positions", warmup+steps, e.info.MaxSeq)
	}
	top := 0
	if logprobs {
		top = 5
	}
	reqs := make([]*request, bs)
	for i := range reqs {
		e.mu.Lock()
		id := e.nextID
		e.nextID++
		e.mu.Unlock()
		r := &request{id: id, req: Request{Prompt: []int32{1, int32(3 + i%200)}, MaxTokens: need, LogProbs: logprobs, TopLogProbs: top,
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
			return res, fmt.Errorf("engine: bench batch %d: %w", bs, err)
		}
		r.ingested = true
		reqs[i] = r
	}
	defer e.benchCleanup(reqs)
	if eager {
		e.forceEager = true
		defer func() { e.forceEager = false }()
	}
	rows := make([]graph.Row, bs)
	for i, r := range reqs {
		rows[i] = graph.Row{ID: r.id, Tokens: r.req.Prompt}
	}
	// Prefill in chunks the prefill limits allow.
	for lo := 0; lo < bs; lo += e.opts.MaxPrefillRows {
		hi := min(bs, lo+e.opts.MaxPrefillRows)
		if _, err := e.runStep(WalkPrefill, rows[lo:hi], reqs[lo:hi], nil); err != nil {
			return res, err
		}
	}
	last := make([]int32, bs)
	var times []time.Duration
	t0 := time.Now()
	for i := 0; i < warmup+steps; i++ {
		for j, r := range reqs {
			rows[j] = graph.Row{ID: r.id, Tokens: []int32{3 + last[j]%200}}
		}
		ts, cs := time.Now(), cputime.Process()
		next, err := e.runStep(WalkDecode, rows, reqs, reqs)
		if err != nil {
			return res, err
		}
		d, cd := time.Since(ts), cputime.Process()-cs
		copy(last, next)
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
