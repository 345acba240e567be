package engine

import (
	"fmt"
	"math"
	"slices"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
)

// Penalties are, like log probabilities, a sampling variant: a step whose
// rows ask for none runs (and replays) the graph it ran without them; a
// step with one row that asks runs the model's KeyPenalties variant, whose
// forward runs OpPenalize on the logits before sampling and OpCountTokens
// on the sampled tokens after. What the ops read is the penalties
// resource's: a pool of per-request rows on the device (each token's
// output count and prompt and stop flags, and the logit bias) written once
// when a request first runs and counted into by the graph itself, and per
// step each row's pool row, flags and parameters, planned into the
// bucket's static inputs like the sampler's.
const (
	// KeyPenalties is the graph key info of the variant that processes
	// logits before sampling.
	KeyPenalties = "penalties"
	// PenaltiesName is the penalties resource's name.
	PenaltiesName = "penalties"
	// MaxLogitBias is the largest bias magnitude (OpenAI's cap).
	MaxLogitBias = 100
)

// Penalties are a request's logit processing before sampling, with vLLM's
// definitions, applied in vLLM's order (min_tokens, the bias, the
// penalties, then temperature and min_p, then top-k and top-p).
type Penalties struct {
	// Repetition divides the positive logits of tokens seen in the prompt
	// or the output and multiplies the others (0 or 1: off).
	Repetition float32
	// Presence and Frequency are subtracted from the logits of tokens in
	// the output: presence once, frequency per occurrence (-2 to 2).
	Presence, Frequency float32
	// LogitBias is added to the logits of its tokens (±MaxLogitBias).
	LogitBias map[int32]float32
	// MinP drops the tokens whose probability is below MinP times the
	// most likely one's (0: off; greedy requests ignore it).
	MinP float32
	// MinTokens masks the stop tokens (the model's unless IgnoreEOS, and
	// the request's StopTokens) until that many tokens are out.
	MinTokens int
}

// On reports whether p changes anything.
func (p Penalties) On() bool {
	return p.pooled() || p.MinP > 0
}

// pooled reports whether p needs a pool row (everything but min_p does).
func (p Penalties) pooled() bool {
	return (p.Repetition != 0 && p.Repetition != 1) || p.Presence != 0 || p.Frequency != 0 || len(p.LogitBias) > 0 || p.MinTokens > 0
}

// validate checks p for a vocabulary of vocab tokens and maxTokens to make.
func (p Penalties) validate(vocab, maxTokens int) error {
	finite := func(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }
	switch {
	case !finite(p.Repetition) || p.Repetition < 0:
		return fmt.Errorf("%w: repetition penalty %v (want > 0; 0 is off)", ErrInvalidRequest, p.Repetition)
	case !finite(p.Presence) || p.Presence < -2 || p.Presence > 2:
		return fmt.Errorf("%w: presence penalty %v (want -2 to 2)", ErrInvalidRequest, p.Presence)
	case !finite(p.Frequency) || p.Frequency < -2 || p.Frequency > 2:
		return fmt.Errorf("%w: frequency penalty %v (want -2 to 2)", ErrInvalidRequest, p.Frequency)
	case !finite(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return fmt.Errorf("%w: min_p %v (want 0 to 1)", ErrInvalidRequest, p.MinP)
	case p.MinTokens < 0 || p.MinTokens > maxTokens:
		return fmt.Errorf("%w: min tokens %d (want 0 to the %d max tokens)", ErrInvalidRequest, p.MinTokens, maxTokens)
	}
	for t, b := range p.LogitBias {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("%w: logit bias for token %d, outside the vocabulary of %d", ErrInvalidRequest, t, vocab)
		}
		if !finite(b) || b < -MaxLogitBias || b > MaxLogitBias {
			return fmt.Errorf("%w: logit bias %v for token %d (want -%d to %d)", ErrInvalidRequest, b, t, MaxLogitBias, MaxLogitBias)
		}
	}
	return nil
}

// PenaltiesPlan is each row's logit processing on the device: zero for a
// step of another key info.
var PenaltiesPlan = PlanKey[accel.PenaltyParams]{PenaltiesName}

// penaltyPool is the penalties resource: pool rows, one per open request
// that needs one (at most MaxBatch are open), allocated on the device once
// and never moved, so graphs read them in place.
type penaltyPool struct {
	dev          accel.Device
	vocab, rows  int
	counts, bias accel.Tensor // [rows, vocab]; nil until first needed
	free         []int
	reqs         map[int64]*penState
	slots        *slotTensors
}

type penState struct {
	p      Penalties
	row    int // pool row, -1 for none
	fresh  bool
	prompt []int32
	stops  []int32
	next   int // tokens sampled by the steps admitted so far
}

// penRecord is each row's token index in the step (for min_tokens).
type penRecord struct{ k []int }

func newPenaltyPool(dev accel.Device, vocab, rows int) *penaltyPool {
	p := &penaltyPool{dev: dev, vocab: vocab, rows: rows, reqs: map[int64]*penState{}, slots: newSlotTensors(dev)}
	for i := rows - 1; i >= 0; i-- {
		p.free = append(p.free, i)
	}
	return p
}

// alloc allocates the pool, once.
func (p *penaltyPool) alloc() error {
	if !p.counts.IsNil() {
		return nil
	}
	n := int64(p.rows) * int64(p.vocab) * 4
	cb, err := p.dev.Alloc(n)
	if err != nil {
		return fmt.Errorf("penalties: a pool of %d rows of %d tokens: %w", p.rows, p.vocab, err)
	}
	bb, err := p.dev.Alloc(n)
	if err != nil {
		_ = p.dev.Free(cb)
		return fmt.Errorf("penalties: a pool of %d rows of %d tokens: %w", p.rows, p.vocab, err)
	}
	p.counts = accel.Tensor{Buf: cb, DType: accel.I32, Rows: p.rows, Cols: p.vocab}
	p.bias = accel.Tensor{Buf: bb, DType: accel.F32, Rows: p.rows, Cols: p.vocab}
	return nil
}

// Bytes is the device memory the pool holds.
func (p *penaltyPool) Bytes() int64 { return p.counts.Bytes() + p.bias.Bytes() }

func (p *penaltyPool) Name() string        { return PenaltiesName }
func (p *penaltyPool) DependsOn() []string { return []string{SamplerName} }

func (p *penaltyPool) Ingest(id int64, info requestInfo) error {
	if _, dup := p.reqs[id]; dup {
		return fmt.Errorf("penalties: row %d already open", id)
	}
	st := &penState{p: info.Penalties, row: -1}
	if !graph.IsPadding(id) && info.Penalties.pooled() {
		if len(p.free) == 0 {
			return fmt.Errorf("penalties: all %d pool rows in use", p.rows)
		}
		if err := p.alloc(); err != nil {
			return err
		}
		st.row, st.fresh = p.free[len(p.free)-1], true
		p.free = p.free[:len(p.free)-1]
		st.prompt, st.stops = info.Prompt, info.Stops
	}
	p.reqs[id] = st
	return nil
}

func (p *penaltyPool) Remove(id int64) error {
	if st, ok := p.reqs[id]; ok {
		if st.row >= 0 {
			p.free = append(p.free, st.row)
		}
		delete(p.reqs, id)
	}
	return nil
}

func (p *penaltyPool) Reset(id int64, _ bool) error {
	if st, ok := p.reqs[id]; ok {
		st.next = 0
	}
	return nil
}

func (p *penaltyPool) Admit(step *Step) (admitStatus, int) {
	for _, r := range step.Rows {
		if _, ok := p.reqs[r.ID]; !ok {
			return admitAllocFailed, 0
		}
	}
	rec := &penRecord{k: make([]int, len(step.Rows))}
	for i, r := range step.Rows {
		st := p.reqs[r.ID]
		rec.k[i] = st.next
		if !atRest(r.ID, step) {
			st.next++
		}
	}
	step.State[PenaltiesName] = rec
	return admitOK, 0
}

func (p *penaltyPool) Unadmit(step *Step) {
	if _, ok := step.State[PenaltiesName].(*penRecord); !ok {
		return
	}
	for _, r := range step.Rows {
		if st, ok := p.reqs[r.ID]; ok && !atRest(r.ID, step) {
			st.next--
		}
	}
	delete(step.State, PenaltiesName)
}

// Plan writes a KeyPenalties step's rows: each row's pool row (-1: none)
// and flags, and its parameters; padding rows pass their logits through.
// A request's pool row is written whole the first time it runs (its first
// step is a prefill, on the engine's stream, with no step in flight).
func (p *penaltyPool) Plan(s accel.Stream, sg *accel.Stager, step *Step) (any, error) {
	if !KeyHas(step.Key, KeyPenalties) {
		return accel.PenaltyParams{}, nil
	}
	samp, err := SamplerPlan.Get(step)
	if err != nil {
		return nil, err
	}
	if err := p.alloc(); err != nil {
		return nil, err
	}
	rec := step.State[PenaltiesName].(*penRecord)
	bs := step.BatchSize()
	rows, params := make([]int32, 2*bs), make([]float32, 4*bs)
	for i := 0; i < bs; i++ {
		rows[2*i], params[4*i] = -1, 1
		if i >= len(step.Rows) || graph.IsPadding(step.Rows[i].ID) {
			continue
		}
		st := p.reqs[step.Rows[i].ID]
		if st.fresh {
			if err := p.write(s, sg, st); err != nil {
				return nil, err
			}
			st.fresh = false
		}
		rows[2*i] = int32(st.row)
		if rec.k[i] < st.p.MinTokens {
			rows[2*i+1] = accel.PenaltyMaskStops
		}
		if len(st.p.LogitBias) == 0 {
			rows[2*i+1] |= accel.PenaltyNoBias // its bias row is all zero
		}
		if r := st.p.Repetition; r != 0 {
			params[4*i] = r
		}
		params[4*i+1], params[4*i+2], params[4*i+3] = st.p.Presence, st.p.Frequency, st.p.MinP
	}
	ts, err := p.slots.get(PenaltiesName, s, step, penaltyShapes(bs))
	if err != nil {
		return nil, err
	}
	if err := stage(s, sg, ts[0], accel.I32Bytes(rows)); err != nil {
		return nil, err
	}
	if err := stage(s, sg, ts[1], accel.F32Bytes(params)); err != nil {
		return nil, err
	}
	return accel.PenaltyParams{Counts: p.counts, Bias: p.bias, Rows: ts[0], Params: ts[1], Temperature: samp.Temperature}, nil
}

// write fills a request's pool row: no counts yet, its prompt's tokens and
// (with min_tokens) its stop tokens flagged, and its bias.
func (p *penaltyPool) write(s accel.Stream, sg *accel.Stager, st *penState) error {
	counts, bias := make([]int32, p.vocab), make([]float32, p.vocab)
	for _, t := range st.prompt {
		counts[t] |= accel.PenaltyPromptBit
	}
	if st.p.MinTokens > 0 {
		for _, t := range st.stops {
			if t >= 0 && int(t) < p.vocab {
				counts[t] |= accel.PenaltyStopBit
			}
		}
	}
	for t, b := range st.p.LogitBias {
		bias[t] = b
	}
	if err := stage(s, sg, p.counts.RowSlice(st.row, st.row+1), accel.I32Bytes(counts)); err != nil {
		return err
	}
	return stage(s, sg, p.bias.RowSlice(st.row, st.row+1), accel.F32Bytes(bias))
}

func penaltyShapes(bs int) []shape { return []shape{{accel.I32, bs, 2}, {accel.F32, bs, 4}} }

func (p *penaltyPool) Commit(*Step) error { return nil }

// Close frees the pool and the per-slot plan buffers.
func (p *penaltyPool) Close() {
	for _, t := range []accel.Tensor{p.counts, p.bias} {
		if !t.IsNil() {
			_ = p.dev.Free(t.Buf)
		}
	}
	p.counts, p.bias = accel.Tensor{}, accel.Tensor{}
	p.slots.free()
}

func (p *penaltyPool) SupportsPrePlan() bool    { return true }
func (p *penaltyPool) ForcesDoubleBuffer() bool { return true }
func (p *penaltyPool) CanCapture() bool         { return true }

// BuildGraphBuffers allocates the pool before any KeyPenalties bucket is
// captured, and those buckets' per-slot buffers.
func (p *penaltyPool) BuildGraphBuffers(specs []graph.SlotSpec) error {
	var pen []graph.SlotSpec
	for _, sp := range specs {
		if KeyHas(sp.Bucket.Key, KeyPenalties) {
			pen = append(pen, sp)
		}
	}
	if len(pen) == 0 {
		return nil
	}
	if err := p.alloc(); err != nil {
		return err
	}
	return p.slots.build(PenaltiesName, pen, func(sp graph.SlotSpec) []shape { return penaltyShapes(sp.Bucket.BatchSize) })
}

// stopsFor is what min_tokens masks for req: the model's stop tokens
// (unless IgnoreEOS) and the request's.
func (e *Engine) stopsFor(req Request) []int32 {
	var out []int32
	if !req.IgnoreEOS {
		out = append(out, e.info.StopTokens...)
	}
	out = append(out, req.StopTokens...)
	slices.Sort(out)
	return slices.Compact(out)
}

// requestInfo is what the resources learn of r when it is ingested.
func (e *Engine) requestInfo(r *request) requestInfo {
	return requestInfo{MaxLen: r.maxLen, Sampling: r.req.Sampling, Prompt: r.req.Prompt, Penalties: r.req.Penalties, Stops: e.stopsFor(r.req)}
}
