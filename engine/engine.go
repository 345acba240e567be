package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/comm"
	"github.com/reprise-ml/reprise/graph"
)

// Walks the engine schedules.
const (
	WalkPrefill = "prefill"
	WalkDecode  = "decode"
)

// Errors Submit returns.
var (
	// ErrInvalidRequest: the request can never run (empty prompt, a token
	// outside the vocabulary, longer than the model or the KV cache holds).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrQueueFull: more requests wait than Options.MaxQueue allows.
	ErrQueueFull = errors.New("request queue full")
	// ErrClosed: the engine has stopped.
	ErrClosed = errors.New("engine closed")
)

// Options configure an Engine.
type Options struct {
	// Graphs captures the model's graph configs and replays them; off, every
	// step runs eager (the correctness control).
	Graphs bool
	// PageSize is the KV cache's positions per page (default 16).
	PageSize int
	// KVPages is the number of KV pages including the sink; 0 sizes the
	// cache for MaxBatch requests of the model's full length, capped at
	// KVMemoryFraction of the device's free memory.
	KVPages int
	// KVMemoryFraction caps an automatically sized cache (default 0.5).
	KVMemoryFraction float64
	// KVCacheDType is the KV cache's element type: accel.F32 (0 too) or
	// accel.F16 (half the bytes per position, values rounded to binary16
	// as they are written), which needs the device's KVCacheF16.
	KVCacheDType accel.DType
	// MaxBatch is the most requests decoded together (default 64, and at
	// most the largest captured decode batch when graphs cap it).
	MaxBatch int
	// MaxPrefillTokens is the most prompt tokens one prefill step carries
	// (default min(512, the model's length)).
	MaxPrefillTokens int
	// MaxPrefillRows is the most prompts one prefill step carries (default 8).
	MaxPrefillRows int
	// MaxQueue is the most requests that may wait; 0 is unbounded.
	MaxQueue int
	// NoPrePlan turns off planning step N+1 while step N replays.
	NoPrePlan bool
	// NoPlan captures every bucket without measuring and planning first.
	NoPlan bool
	// MemoryFraction caps what the device may hold once graphs are
	// captured, as a fraction of its total memory; memory already in use
	// counts against it (default 0.9).
	MemoryFraction float64
	// BackgroundCapture serves at once, eagerly, and captures the planned
	// buckets between steps, the most requested first; each goes live when
	// its golden check passes. Only for a single rank.
	BackgroundCapture bool
	// PlanCache is the directory measured capture costs persist in
	// (default the user cache directory; "off" disables it). The command
	// line sets it from --plan-cache or REPRISE_PLAN_CACHE.
	PlanCache string
	// Group is the ranks that must keep the same graphs (nil: one).
	Group comm.Group
	// Runner configures the graph runner (name, golden check, tolerance).
	Runner graph.Options
	// Logger (nil: slog.Default()).
	Logger *slog.Logger
}

// Request is one generation.
type Request struct {
	// Prompt is the input tokens, BOS included if the model wants one.
	Prompt []int32
	// MaxTokens is the most tokens to generate (at least 1).
	MaxTokens int
	Sampling  Sampling
	// StopTokens end the request when sampled, besides the model's own.
	StopTokens []int32
	// IgnoreEOS keeps generating past the model's own stop tokens (they
	// are then emitted as tokens); StopTokens still end the request.
	IgnoreEOS bool
	// LogProbs returns each token's log-probability, and the TopLogProbs
	// (at most MaxTopLogProbs) most likely tokens' with it.
	LogProbs    bool
	TopLogProbs int
	// Penalties process the logits before sampling (KeyPenalties).
	Penalties Penalties
}

// Output is one event of a request: a token, or the end.
type Output struct {
	Token int32
	// LogProb is Token's log-probability and TopLogProbs the most likely
	// tokens', largest first, when the request asked (HasLogProb).
	LogProb     float32
	HasLogProb  bool
	TopLogProbs []TokenLogProb
	// Done marks the last output; Reason says why: "stop" (a stop token),
	// "length" (MaxTokens reached), "cancelled", or "error" (with Err).
	Done   bool
	Reason string
	Err    error
}

// Handle is a submitted request.
type Handle struct {
	r *request
}

// Outputs delivers the request's tokens and then one Done output. It is
// buffered for the whole request: the engine never waits for a reader.
func (h *Handle) Outputs() <-chan Output { return h.r.out }

// Cancel stops the request; its storage is freed before the next step.
func (h *Handle) Cancel() { h.r.cancel() }

// ID is the request's id in the engine.
func (h *Handle) ID() int64 { return h.r.id }

type request struct {
	id        int64
	req       Request
	out       chan Output
	generated []int32
	maxLen    int
	cancelled atomic.Bool
	wake      func()
	ingested  bool
	times     requestTimes
	// forks are the other choices of this request's prompt, opened once
	// its prefill ran (fork.go).
	forks []*request
}

func (r *request) cancel() {
	if r.cancelled.CompareAndSwap(false, true) {
		r.wake()
	}
}

// Engine runs a model: it schedules requests into prefill and decode steps,
// replays captured graphs where a bucket fits and runs eager otherwise.
type Engine struct {
	dev    accel.Device
	model  Model
	info   ModelInfo
	opts   Options
	log    *slog.Logger
	sr     *stepRunner
	kv     *kvCache
	pos    *positionsResource
	samp   *sampler
	pen    *penaltyPool
	node   *node
	runner *graph.Runner
	stream accel.Stream
	stager *accel.Stager
	host   accel.HostBuffer // where sampled tokens are read back
	stops  map[int32]bool

	mu     sync.Mutex
	queue  []*request // submitted, not yet seen by the loop
	nextID int64
	closed bool // no more submissions (Close, or the loop ended)
	// released: Close has run
	released bool
	wakeCh   chan struct{}
	tasks    chan func()
	done     chan struct{}
	started  bool

	// owned by the loop
	waiting []*request
	running []*request
	pre     *prePlan

	regions map[string]*regionRun

	stats   Stats
	planRep *PlanReport
	bg      *background
	startAt time.Time
	// forceEager makes every step run eager (benchmarks); loop-owned.
	forceEager bool
	// keepLogits keeps the last step's logits (when the model outputs
	// them) in lastLogits; loop-owned.
	keepLogits bool
	lastLogits []float32
	// floor is what the largest eager step takes (ensureFloor).
	floor int64
	// traceStep, if set, hears one line per step served (tests' golden
	// traces); loop-owned.
	traceStep func(string)
	// scores are the last step's log probabilities; loop-owned.
	scores stepScores
	// maxBatch is Options.MaxBatch as given (with its default): the batch
	// cap the graphs may lower (refreshBatchCap) but never raise.
	maxBatch int
	// failed is why the engine stopped on its own (Err), under mu.
	failed error
	// capturing is set while graphs are required (RequireGraphs) and
	// background capture has buckets still to make live: /health is not
	// ready.
	capturing atomic.Bool
}

// New builds the engine's resources on dev. Call Start to capture graphs
// and run it.
func New(dev accel.Device, m Model, opts Options) (*Engine, error) {
	info := m.Info()
	if opts.PageSize == 0 {
		opts.PageSize = 16
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = 64
	}
	if opts.MaxPrefillRows == 0 {
		opts.MaxPrefillRows = 8
	}
	if opts.MaxPrefillTokens == 0 {
		opts.MaxPrefillTokens = min(512, info.MaxSeq)
	}
	if opts.KVMemoryFraction == 0 {
		opts.KVMemoryFraction = 0.5
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	e := &Engine{dev: dev, model: m, info: info, opts: opts, log: opts.Logger, stops: map[int32]bool{},
		wakeCh: make(chan struct{}, 1), tasks: make(chan func()), done: make(chan struct{}), maxBatch: opts.MaxBatch}
	for _, t := range info.StopTokens {
		e.stops[t] = true
	}
	switch opts.KVCacheDType {
	case 0:
		opts.KVCacheDType = accel.F32
	case accel.F32:
	case accel.F16:
		if !dev.Capability().KVCacheF16 {
			return nil, fmt.Errorf("engine: an f16 KV cache on %s: %w", dev.Info(), accel.ErrUnsupported)
		}
	default:
		return nil, fmt.Errorf("engine: KV cache type %s: want f32 or f16: %w", opts.KVCacheDType, accel.ErrInvalidArgument)
	}
	e.opts.KVCacheDType = opts.KVCacheDType
	pages := opts.KVPages
	kvdim := info.KVHeads * info.HeadSize
	if pages == 0 {
		want := opts.MaxBatch*((info.MaxSeq+opts.PageSize-1)/opts.PageSize) + 1
		budget := int64(float64(dev.MemInfo().Free) * opts.KVMemoryFraction)
		pages = kvPagesWithin(budget, want, info.Layers, opts.PageSize, kvdim, opts.KVCacheDType)
	}
	var err error
	if e.kv, err = newKVCache(dev, kvConfig{Layers: info.Layers, KVDim: kvdim, PageSize: opts.PageSize, Pages: pages,
		MaxLen: info.MaxSeq, DType: opts.KVCacheDType}); err != nil {
		return nil, err
	}
	e.pos, e.samp, e.pen = newPositions(dev), newSampler(dev), newPenaltyPool(dev, info.Vocab, opts.MaxBatch)
	if e.sr, err = newStepRunner(e.kv, e.pos, e.samp, e.pen); err != nil {
		return nil, err
	}
	if sm, ok := m.(StepModel); ok {
		if err := declareSteps(e.sr, sm, m.Configs()); err != nil {
			return nil, err
		}
	}
	if e.stager, err = accel.NewStager(dev, 16, 4096); err != nil {
		return nil, err
	}
	if e.host, err = dev.AllocHost(int64(max(opts.MaxBatch, opts.MaxPrefillRows)) * 4); err != nil {
		return nil, err
	}
	e.node = newNode(e, m, e.sr, e.stager)
	e.regions = map[string]*regionRun{}
	if rm, ok := m.(RegionModel); ok {
		for _, reg := range rm.Regions() {
			var rs []resource
			for _, name := range reg.Resources {
				r := e.sr.resource(name)
				if r == nil {
					return nil, fmt.Errorf("engine: region %s reads unknown resource %q", reg.Label, name)
				}
				rs = append(rs, r)
			}
			sr, err := newStepRunner(rs...)
			if err != nil {
				return nil, err
			}
			rr := &regionRun{reg: reg, sr: sr}
			rr.node = &regionNode{e: e, rr: rr}
			e.regions[reg.Label] = rr
		}
	}
	e.log.Info("engine ready", "model", info.Name, "device", dev.Info().String(), "kv_pages", pages,
		"page_size", opts.PageSize, "kv_bytes", e.kv.Bytes(), "kv_dtype", opts.KVCacheDType, "graphs", opts.Graphs)
	return e, nil
}

// declareSteps gives sr the resources each walk's steps use, as the model
// declares them: the walks the engine schedules and every config's.
func declareSteps(sr *stepRunner, sm StepModel, configs []*graph.Config) error {
	walks := []string{WalkPrefill, WalkDecode}
	for _, c := range configs {
		walks = append(walks, c.Walks()...)
	}
	for _, w := range walks {
		if names := sm.StepResources(w); names != nil {
			if err := sr.declare(w, names); err != nil {
				return err
			}
		}
	}
	return nil
}

// Runner is the graph runner, nil when graphs are off.
func (e *Engine) Runner() *graph.Runner { return e.runner }

// Start captures the model's graphs (when Options.Graphs) and starts the
// scheduling loop, which runs until ctx ends or Close.
func (e *Engine) Start(ctx context.Context) error {
	e.startAt = time.Now()
	if e.opts.Graphs {
		if err := e.startGraphs(ctx, true); err != nil {
			return err
		}
	} else {
		s, err := e.dev.NewStream()
		if err != nil {
			return err
		}
		e.stream = s
		if err := e.ensureFloor(s); err != nil {
			return err
		}
	}
	e.mu.Lock()
	e.started = true
	e.mu.Unlock()
	go e.loop(ctx)
	return nil
}

// Close stops the loop, fails what is left, and releases the engine.
func (e *Engine) Close() {
	e.mu.Lock()
	if e.released {
		e.mu.Unlock()
		return
	}
	e.closed, e.released = true, true
	started := e.started
	e.mu.Unlock()
	e.wake()
	if started {
		<-e.done
	}
	for _, rr := range e.regions {
		if rr.runner != nil {
			rr.runner.Close()
		}
	}
	if e.runner != nil {
		e.runner.Close()
	} else if e.stream != nil {
		e.stream.Close()
	}
	e.stager.Close()
	_ = e.dev.FreeHost(e.host)
	e.scores.close()
	e.kv.Close(e.dev)
	e.pos.Close()
	e.samp.Close()
	e.pen.Close()
}

// Done is closed once the engine's loop has ended: after Close, once the
// context given to Start ended, or when the engine stopped on its own (Err
// says why). It never closes for an engine that was not started.
func (e *Engine) Done() <-chan struct{} { return e.done }

// Err is why the engine stopped on its own, nil while it runs and after a
// Close or the end of its context. With Options.Runner.RequireGraphs and
// BackgroundCapture, a bucket that will not replay (a plan that leaves it
// out, a dropped capture) stops the engine with an error wrapping
// graph.ErrGraphsRequired: a deployment that requires graphs would rather
// stop than serve at eager latency.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failed
}

// fail stops the engine with err: it is said at ERROR, requests in flight end
// with it, and the loop returns before its next step (Err, Done).
func (e *Engine) fail(err error) {
	e.mu.Lock()
	if e.failed == nil {
		e.failed = err
	}
	e.closed = true
	e.mu.Unlock()
	e.log.Error("engine stopped", "err", err)
	e.wake()
}

func (e *Engine) wake() {
	select {
	case e.wakeCh <- struct{}{}:
	default:
	}
}

// Validate checks a request without submitting it.
func (e *Engine) Validate(req Request) error {
	switch {
	case len(req.Prompt) == 0:
		return fmt.Errorf("%w: empty prompt", ErrInvalidRequest)
	case req.MaxTokens < 1:
		return fmt.Errorf("%w: max tokens %d (want at least 1)", ErrInvalidRequest, req.MaxTokens)
	case len(req.Prompt)+req.MaxTokens-1 > e.info.MaxSeq:
		return fmt.Errorf("%w: %d prompt tokens + %d to generate exceed the model's %d positions",
			ErrInvalidRequest, len(req.Prompt), req.MaxTokens, e.info.MaxSeq)
	case len(req.Prompt) > e.opts.MaxPrefillTokens:
		return fmt.Errorf("%w: %d prompt tokens, a prefill step takes at most %d", ErrInvalidRequest, len(req.Prompt), e.opts.MaxPrefillTokens)
	case !e.kv.Fits(len(req.Prompt) + req.MaxTokens - 1):
		return fmt.Errorf("%w: %d positions do not fit the KV cache (%d pages of %d)", ErrInvalidRequest,
			len(req.Prompt)+req.MaxTokens-1, e.kv.Config().Pages-1, e.kv.Config().PageSize)
	}
	for i, t := range req.Prompt {
		if t < 0 || int(t) >= e.info.Vocab {
			return fmt.Errorf("%w: prompt token %d at %d is outside the vocabulary of %d", ErrInvalidRequest, t, i, e.info.Vocab)
		}
	}
	if req.TopLogProbs < 0 || req.TopLogProbs > MaxTopLogProbs || (req.TopLogProbs > 0 && !req.LogProbs) {
		return fmt.Errorf("%w: %d top log probabilities (0 to %d, with LogProbs)", ErrInvalidRequest, req.TopLogProbs, MaxTopLogProbs)
	}
	if err := req.Penalties.validate(e.info.Vocab, req.MaxTokens); err != nil {
		return err
	}
	s := req.Sampling
	if s.Temperature < 0 || s.TopK < 0 || s.TopP < 0 || s.TopP > 1 {
		return fmt.Errorf("%w: sampling %+v (temperature >= 0, top-k >= 0, 0 <= top-p <= 1)", ErrInvalidRequest, s)
	}
	return nil
}

// Submit queues a request. Its outputs arrive on the handle; cancelling ctx
// cancels the request.
func (e *Engine) Submit(ctx context.Context, req Request) (*Handle, error) {
	hs, err := e.SubmitChoices(ctx, req, []uint64{req.Sampling.Seed})
	if err != nil {
		return nil, err
	}
	return hs[0], nil
}

// Generate submits a request and collects its tokens.
func (e *Engine) Generate(ctx context.Context, req Request) ([]int32, string, error) {
	h, err := e.Submit(ctx, req)
	if err != nil {
		return nil, "", err
	}
	var toks []int32
	for o := range h.Outputs() {
		if o.Done {
			return toks, o.Reason, o.Err
		}
		toks = append(toks, o.Token)
	}
	return toks, "", ErrClosed
}
