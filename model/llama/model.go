package llama

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
	"github.com/reprise-ml/reprise/model/llama2c"
)

// Options configure a model on a device.
type Options struct {
	// Name labels the model (default "llama").
	Name string
	// Weights is the storage of the matrices: accel.F32 (default),
	// accel.BF16, or quantized at load with ggml's reference quantizers
	// (accel.Q8_0, accel.Q4_0, accel.Q4_K) the way llama-quantize stores a
	// model of that type (see quantPlan). Matrices a file stores as Q8_0,
	// Q4_0, Q4_K or Q6_K are used as they are whatever this says.
	Weights accel.DType
	// Logits also returns each row's logits as output engine.OutputLogits [rows,
	// vocab], for tests and inspection.
	Logits bool
	// PrefillLengths are the packed prefill token buckets to capture
	// (default 16..512 by powers of two, capped at the model's length).
	PrefillLengths []int
	// PrefillBatchSizes are the prompt counts of prefill buckets (default
	// 1, 2, 4, 8).
	PrefillBatchSizes []int
	// DecodeBatchSizes are the decode buckets (default graph.DefaultBatchSizes).
	DecodeBatchSizes []int
	// StopTokens end a request (default llama2.c's: BOS).
	StopTokens []int32
	// LogProbGraphs also captures the engine.KeyLogProbs variant of the
	// decode (and whole prefill) configs, so that steps asking for log
	// probabilities replay too; without it they run eager (a second family
	// of buckets costs capture time and memory, so it is asked for).
	LogProbGraphs bool
	// PenaltyGraphs also captures the engine.KeyPenalties variant (and,
	// with LogProbGraphs, engine.KeyLogProbsPenalties), for steps with
	// penalties, a logit bias, min_p or min_tokens; without it they run
	// eager.
	PenaltyGraphs bool
	// Prefill is how prefill steps may be captured: PrefillPiecewise (the
	// default: the block loop is a region captured per (prompts, tokens)
	// bucket; the embedding and the logits stay eager), PrefillWhole (the
	// whole step is a packed bucket) or PrefillEager (never captured).
	Prefill string
}

// Prefill modes.
const (
	PrefillPiecewise = "piecewise"
	PrefillWhole     = "whole"
	PrefillEager     = "eager"
)

// RegionBlocks is the block loop's region label, and WalkBlocks the walk its
// buckets are keyed by.
const (
	RegionBlocks = "blocks"
	WalkBlocks   = "prefill.blocks"
)

// Model is a loaded decoder.
type Model struct {
	cfg     Config
	opts    Options
	dev     accel.Device
	freqs   accel.Tensor // [1, head_dim/2]: RoPE's frequency per pair (ropeFrequencies)
	emb     accel.Tensor
	layers  []layer
	final   accel.Tensor
	cls     accel.Tensor
	bufs    []accel.Buffer
	params  int64
	wbytes  int64
	rbytes  int64  // of wbytes, what one batch-1 forward reads (Info's ReadBytes)
	mtypes  string // Info's MatrixTypes
	aliased int64  // of wbytes, read in place from the source's host memory
	configs []*graph.Config
	regions []engine.Region
}

type layer struct {
	rmsAtt, wq, wk, wv, wo, rmsFFN, w1, w2, w3 accel.Tensor
	// Optional (zero Buf when the architecture has none): q/k/v biases
	// (Qwen2) and per-head q/k norm weights (Qwen3).
	bq, bk, bv, qNorm, kNorm accel.Tensor
}

// New uploads a llama2.c checkpoint's weights to dev (through stream s).
func New(dev accel.Device, s accel.Stream, ck *llama2c.Checkpoint, opts Options) (*Model, error) {
	if err := ck.Config.Validate(); err != nil {
		return nil, err
	}
	return NewFrom(dev, s, CheckpointWeights(ck), opts)
}

// NewFrom uploads the weights of any source to dev (through stream s), each
// tensor once, converted into the Options' storage on its way through two
// bounded staging buffers. A tensor the source holds exactly as the device
// stores it (same type, nothing to permute) is not copied where the device
// reads host memory in place (accel.HostAliaser) and the source can keep
// its bytes (Retainer): the device uses the file's mapped pages, which stay
// mapped until the model is closed, whenever the caller closes the source.
// The source stays open (the caller closes it).
func NewFrom(dev accel.Device, s accel.Stream, ws Weights, opts Options) (*Model, error) {
	cfg := ws.Config()
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", ws.Path(), err)
	}
	if opts.Name == "" {
		opts.Name = "llama"
	}
	if opts.Weights == 0 {
		opts.Weights = accel.F32
	}
	if opts.StopTokens == nil {
		opts.StopTokens = []int32{llama2c.BOS}
	}
	switch opts.Prefill {
	case "":
		opts.Prefill = PrefillPiecewise
	case PrefillPiecewise, PrefillWhole, PrefillEager:
	default:
		return nil, fmt.Errorf("llama: prefill mode %q: want %s, %s or %s", opts.Prefill, PrefillPiecewise, PrefillWhole, PrefillEager)
	}
	switch opts.Weights {
	case accel.F32, accel.BF16, accel.Q8_0, accel.Q4_0, accel.Q4_K:
	default:
		return nil, fmt.Errorf("llama: weights must be f32, bf16, q8_0, q4_0 or q4_k, not %s", opts.Weights)
	}
	plan := quantPlan(cfg, opts.Weights)
	m := &Model{cfg: cfg, opts: opts, dev: dev, params: cfg.Params()}
	before := dev.MemInfo()
	u, err := newUploader(dev, s, cfg.HeadDim)
	if err != nil {
		return nil, err
	}
	defer u.close()
	fail := func(e error) (*Model, error) { m.Close(); return nil, e }
	// up uploads a role's tensor after checking its shape; optional roles
	// may be absent (a zero Tensor).
	up := func(role string, layer, rows, cols int, dt accel.DType, optional bool) (accel.Tensor, error) {
		w, ok, err := ws.Weight(role, layer)
		if err != nil {
			return accel.Tensor{}, err
		}
		name := role
		if layer >= 0 {
			name = fmt.Sprintf("blk.%d.%s", layer, role)
		}
		if !ok {
			if optional {
				return accel.Tensor{}, nil
			}
			return accel.Tensor{}, fmt.Errorf("llama: %s: no tensor %s (architecture %s)", ws.Path(), name, cfg.Arch)
		}
		if w.Rows != rows || w.Cols != cols {
			return accel.Tensor{}, fmt.Errorf("llama: %s is %d×%d, the config (%v) needs %d×%d", where(w), w.Rows, w.Cols, cfg, rows, cols)
		}
		if w, dt, err = plan.storage(w, role, dt); err != nil {
			return accel.Tensor{}, err
		}
		n := int64(rows) * dt.RowBytes(cols)
		verbatim, err := u.check(w, dt, n)
		if err != nil {
			return accel.Tensor{}, err
		}
		// A weight the file holds exactly as the device stores it is read
		// in place where the device can (the CPU device: the file's
		// mapped pages, kept until the model is closed); any other is
		// converted into device memory of its own.
		var b accel.Buffer
		aliased := false
		if verbatim {
			b, aliased, err = alias(dev, ws, w)
		}
		if !aliased && err == nil {
			b, err = dev.Alloc(n)
		}
		if errors.Is(err, accel.ErrOutOfMemory) {
			// Said in the user's terms, not the allocator's.
			now := dev.MemInfo()
			return accel.Tensor{}, fmt.Errorf("llama: the weights need %s (%s, %s weights); the device's memory is %s, "+
				"%s of it free before loading, and it ran out after %s of them were loaded, holding %s: %w",
				mib(weightBytes(cfg, opts.Weights)), opts.Name, opts.Weights, mib(before.Total), mib(before.Free),
				mib(m.wbytes), mib(before.Free-now.Free), accel.ErrOutOfMemory)
		}
		if err != nil {
			return accel.Tensor{}, fmt.Errorf("llama: weights: %s: %w", name, err)
		}
		m.bufs = append(m.bufs, b)
		m.wbytes += b.Len()
		if aliased {
			m.aliased += b.Len()
		} else {
			if err := u.upload(b, w, dt); err != nil {
				return accel.Tensor{}, err
			}
			ws.Done(w)
		}
		return accel.Tensor{Buf: b, DType: dt, Rows: rows, Cols: cols}, nil
	}
	d, h, qd, kvd, v := cfg.Dim, cfg.Hidden, cfg.QDim(), cfg.KVDim(), cfg.Vocab
	wdt := opts.Weights
	// The embedding stays float32: it is gathered, not multiplied, and a
	// shared classifier reuses it.
	embDT := accel.F32
	if !cfg.TiedEmbeddings && wdt == accel.BF16 {
		embDT = wdt
	}
	if m.emb, err = up(RoleEmbedding, -1, v, d, embDT, false); err != nil {
		return fail(err)
	}
	for i := range cfg.Layers {
		var ly layer
		for _, w := range []struct {
			dst        *accel.Tensor
			role       string
			rows, cols int
			dt         accel.DType
			need       bool
		}{
			{&ly.rmsAtt, RoleAttnNorm, 1, d, accel.F32, true}, {&ly.wq, RoleQ, qd, d, wdt, true},
			{&ly.wk, RoleK, kvd, d, wdt, true}, {&ly.wv, RoleV, kvd, d, wdt, true},
			{&ly.bq, RoleQBias, 1, qd, accel.F32, cfg.QKVBias}, {&ly.bk, RoleKBias, 1, kvd, accel.F32, cfg.QKVBias},
			{&ly.bv, RoleVBias, 1, kvd, accel.F32, cfg.QKVBias},
			{&ly.qNorm, RoleQNorm, 1, cfg.HeadDim, accel.F32, cfg.QKNorm}, {&ly.kNorm, RoleKNorm, 1, cfg.HeadDim, accel.F32, cfg.QKNorm},
			{&ly.wo, RoleO, d, qd, wdt, true}, {&ly.rmsFFN, RoleFFNNorm, 1, d, accel.F32, true},
			{&ly.w1, RoleGate, h, d, wdt, true}, {&ly.w2, RoleDown, d, h, wdt, true}, {&ly.w3, RoleUp, h, d, wdt, true},
		} {
			if !w.need {
				// A tensor the config does not declare must not be
				// there: it would change the maths.
				if x, ok, _ := ws.Weight(w.role, i); ok {
					return fail(fmt.Errorf("llama: %s: the config (%v) declares no such tensor", where(x), cfg))
				}
				continue
			}
			if *w.dst, err = up(w.role, i, w.rows, w.cols, w.dt, false); err != nil {
				return fail(err)
			}
		}
		m.layers = append(m.layers, ly)
	}
	if m.final, err = up(RoleOutputNorm, -1, 1, d, accel.F32, false); err != nil {
		return fail(err)
	}
	if cfg.TiedEmbeddings {
		if x, ok, _ := ws.Weight(RoleOutput, -1); ok {
			return fail(fmt.Errorf("llama: %s: the embeddings are tied, yet the file has a classifier", where(x)))
		}
		m.cls = m.emb
	} else if m.cls, err = up(RoleOutput, -1, v, d, wdt, false); err != nil {
		return fail(err)
	}
	freqs, err := ropeFrequencies(cfg)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", ws.Path(), err))
	}
	fb, err := dev.Alloc(int64(4 * len(freqs)))
	if err != nil {
		return fail(fmt.Errorf("llama: weights: the RoPE table: %w", err))
	}
	m.bufs = append(m.bufs, fb)
	if err := accel.Upload(s, fb, accel.F32Bytes(freqs)); err != nil {
		return fail(err)
	}
	m.wbytes += fb.Len()
	m.freqs = accel.Tensor{Buf: fb, DType: accel.F32, Rows: 1, Cols: len(freqs)}
	// An untied embedding is a row gather: one row of it is read per token,
	// not the table (at 1B, 262 MB of float32 that a roofline would count
	// as read on every step).
	m.rbytes = m.wbytes
	if !cfg.TiedEmbeddings {
		m.rbytes -= m.emb.Buf.Len() - m.emb.DType.RowBytes(d)
	}
	if u, ok := ws.(interface{ Unused() []string }); ok {
		if names := u.Unused(); len(names) > 0 {
			return fail(fmt.Errorf("llama: %s: tensor %q (and %d more) is not part of the %s architecture reprise implements", ws.Path(), names[0], len(names)-1, cfg.Arch))
		}
	}
	// A device that keeps matrices in its own layout makes that copy now, so
	// that it is charged before the engine sizes its KV cache from MemInfo.
	// Declining is not an error: the device then packs at first use or reads
	// the row-major bytes.
	if p, ok := dev.(accel.WeightPacker); ok {
		var ws []accel.Tensor
		for _, ly := range m.layers {
			ws = append(ws, ly.wq, ly.wk, ly.wv, ly.wo, ly.w1, ly.w2, ly.w3)
		}
		_ = p.PackWeights(append(ws, m.cls)...)
	}
	m.mtypes = matrixTypes(m)
	if d := *plan.dequantised; len(d) > 0 {
		slog.Info("llama: matrices of quantized types reprise does not run quantized were dequantised",
			"storage", wdt, "count", len(d), "first", d[0])
	}
	m.configs = m.graphConfigs()
	return m, nil
}

// matrixTypes names the storage types of m's matrices (the layers' and
// the classifier; a tied classifier is the embedding), by bytes, most first.
func matrixTypes(m *Model) string {
	bytes := map[accel.DType]int64{}
	add := func(w accel.Tensor) {
		if w.Rows > 0 {
			bytes[w.DType] += w.DType.RowBytes(w.Cols) * int64(w.Rows)
		}
	}
	for _, ly := range m.layers {
		for _, w := range []accel.Tensor{ly.wq, ly.wk, ly.wv, ly.wo, ly.w1, ly.w2, ly.w3} {
			add(w)
		}
	}
	add(m.cls)
	dts := make([]accel.DType, 0, len(bytes))
	for dt := range bytes {
		dts = append(dts, dt)
	}
	slices.SortFunc(dts, func(a, b accel.DType) int {
		if c := cmp.Compare(bytes[b], bytes[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	names := make([]string, len(dts))
	for i, dt := range dts {
		names[i] = dt.String()
	}
	return strings.Join(names, ", ")
}

// weightBytes is what NewFrom uploads for cfg with matrices stored as wdt:
// the embedding (when tied), the norms, the biases and RoPE's frequency
// table stay float32.
func weightBytes(cfg Config, wdt accel.DType) int64 {
	plan := quantPlan(cfg, wdt)
	rb := func(dt accel.DType, rows, cols int) int64 { return int64(rows) * dt.RowBytes(cols) }
	per := wdt.Size()
	d, h, qd, kvd, v := int64(cfg.Dim), int64(cfg.Hidden), int64(cfg.QDim()), int64(cfg.KVDim()), int64(cfg.Vocab)
	matrices := int64(cfg.Layers) * (2*qd*d + 2*kvd*d + 3*h*d)
	if plan.mat.BlockSize() > 1 {
		D, H, Q, K := int(d), int(h), int(qd), int(kvd)
		matrices = int64(cfg.Layers) * (rb(plan.of(D), Q, D) + rb(plan.of(Q), D, Q) + 2*rb(plan.of(D), K, D) +
			2*rb(plan.of(D), H, D) + rb(plan.of(H), D, H))
		per = 1
	}
	vectors := int64(cfg.Layers)*2*d + d
	if cfg.QKVBias {
		vectors += int64(cfg.Layers) * (qd + 2*kvd)
	}
	if cfg.QKNorm {
		vectors += int64(cfg.Layers) * 2 * int64(cfg.HeadDim)
	}
	n := per*matrices + 4*vectors + 4*int64(cfg.HeadDim/2) // the last: RoPE's frequency table
	switch {
	case cfg.TiedEmbeddings:
		n += 4 * v * d
	case plan.mat.BlockSize() > 1:
		// The embedding is gathered as float32; the classifier is quantized.
		n += 4*v*d + rb(plan.output(int(d)), int(v), int(d))
	default:
		n += 2 * per * v * d // embedding and classifier both as wdt
	}
	return n
}

// mib formats a byte count for messages: MiB with one decimal.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// Close frees the weights.
func (m *Model) Close() {
	for _, b := range m.bufs {
		_ = m.dev.Free(b)
	}
	m.bufs = nil
}

// Config is the model's shape.
func (m *Model) Config() Config { return m.cfg }

// InPlaceBytes is how many of the weights' bytes on the device are the
// source's own host memory, read in place rather than copied (see NewFrom).
func (m *Model) InPlaceBytes() int64 { return m.aliased }

// Info implements engine.Model.
func (m *Model) Info() engine.ModelInfo {
	return engine.ModelInfo{Name: m.opts.Name, Layers: m.cfg.Layers, KVHeads: m.cfg.KVHeads, HeadSize: m.cfg.HeadSize(),
		Vocab: m.cfg.Vocab, MaxSeq: m.cfg.SeqLen, StopTokens: m.opts.StopTokens, Params: m.params, WeightBytes: m.wbytes, ReadBytes: m.rbytes, MatrixTypes: m.mtypes}
}

func (m *Model) graphConfigs() []*graph.Config {
	lengths := m.opts.PrefillLengths
	if lengths == nil {
		for n := 16; n <= min(512, m.cfg.SeqLen); n *= 2 {
			lengths = append(lengths, n)
		}
	}
	prefillBS := m.opts.PrefillBatchSizes
	if prefillBS == nil {
		prefillBS = []int{1, 2, 4, 8}
	}
	// The sampling variants asked for: batches that ask for log
	// probabilities or penalties replay theirs, the others the plain graph.
	keys := []string{""}
	if m.opts.LogProbGraphs {
		keys = append(keys, engine.KeyLogProbs)
	}
	if m.opts.PenaltyGraphs {
		keys = append(keys, engine.KeyPenalties)
		if m.opts.LogProbGraphs {
			keys = append(keys, engine.KeyLogProbsPenalties)
		}
	}
	var cs []*graph.Config
	for _, k := range keys {
		cs = append(cs, &graph.Config{Walk: engine.WalkDecode, KeyInfo: k, Batched: &graph.Batched{TokensPerRow: 1},
			BatchSizes: m.opts.DecodeBatchSizes, CapEagerBatch: k == ""})
	}
	if len(lengths) == 0 || len(prefillBS) == 0 {
		return cs
	}
	switch m.opts.Prefill {
	case PrefillWhole:
		// "last" holds one index per row, so it follows the batch size, not
		// the token count: its sequence axis is declared.
		for _, k := range keys {
			cs = append(cs, &graph.Config{Walk: engine.WalkPrefill, KeyInfo: k, Packed: &graph.Packed{TokenLengths: lengths},
				BatchSizes: prefillBS, SeqAxis: map[string]int{"last": 1}})
		}
	case PrefillPiecewise:
		m.regions = []engine.Region{{
			Label: RegionBlocks, Walk: engine.WalkPrefill,
			Config: &graph.Config{Walk: WalkBlocks, Packed: &graph.Packed{TokenLengths: lengths}, BatchSizes: prefillBS},
			// The block loop reads the KV cache and the positions; the
			// sampler stays with the eager tail.
			Resources: []string{engine.KVName, engine.PositionsName},
			Inputs:    m.blocksInputs,
			// Leased and planned with the prefill step, before its
			// forward: the forward then only stages and replays.
			LeaseBeforeStep: true,
		}}
	}
	return cs
}

// Regions implements engine.RegionModel: the prefill block loop, unless the
// prefill is captured whole or never.
func (m *Model) Regions() []engine.Region { return m.regions }

// blocksInputs are a capture's inputs of the block loop: zero hidden states
// and each token's row.
func (m *Model) blocksInputs(step *engine.Step) graph.Inputs {
	rows := make([]int32, step.Tokens)
	t := 0
	for i, r := range step.Rows {
		for range r.Tokens {
			rows[t] = int32(i)
			t++
		}
	}
	x := graph.HostTensor{DType: accel.F32, Rows: step.Tokens, Cols: m.cfg.Dim, Data: make([]byte, 4*step.Tokens*m.cfg.Dim)}
	return graph.Inputs{"x": x, "token_rows": graph.HostI32(rows)}
}

// Configs implements engine.Model.
func (m *Model) Configs() []*graph.Config { return m.configs }

// Preprocess builds the step's inputs: its tokens, the row of each token,
// and the last token of each row (-1 for a row without tokens), sized for
// the step's bucket.
func (m *Model) Preprocess(step *engine.Step) graph.Inputs {
	bs := step.BatchSize()
	toks := make([]int32, step.Tokens)
	rows := make([]int32, step.Tokens)
	last := make([]int32, bs)
	t := 0
	for i := range last {
		last[i] = -1
	}
	for i, r := range step.Rows {
		for _, tok := range r.Tokens {
			toks[t], rows[t] = tok, int32(i)
			t++
		}
		if len(r.Tokens) > 0 {
			last[i] = int32(t - 1)
		}
	}
	return graph.Inputs{"tokens": graph.HostI32(toks), "token_rows": graph.HostI32(rows), "last": graph.HostI32(last)}
}

// Forward implements engine.Model: the embedding, the block loop (a region
// of its own in a piecewise prefill), the logits of each row's last token,
// and one sampled token per row.
func (m *Model) Forward(l *accel.Launcher, b *engine.Batch) (map[string]accel.Tensor, error) {
	c := m.cfg
	T, R := b.Tokens, b.Rows
	toks, rows, last := b.In["tokens"], b.In["token_rows"], b.In["last"]
	if toks.Len() != T || rows.Len() != T || last.Len() != R || b.KV == nil {
		return nil, fmt.Errorf("llama: batch of %d tokens, %d rows: inputs %v %v %v", T, R, toks, rows, last)
	}
	x := l.Alloc(accel.F32, T, c.Dim)
	l.Embed(x, m.emb, toks)
	var h accel.Tensor
	var region *engine.RegionResult
	if b.Walk == engine.WalkPrefill && len(m.regions) > 0 {
		var err error
		if region, err = b.RunRegion(l, RegionBlocks, map[string]accel.Tensor{"x": x, "token_rows": rows}); err != nil {
			return nil, l.Fail(err)
		}
		h = region.Out["x"]
	} else {
		m.blocks(l, x, rows, b)
		h = x
	}
	// The last tokens' rows first, then their norm (a row's norm depends
	// on that row alone): a prefill normalizes only the rows it samples,
	// and in a replayed decode step both run on every worker (neither
	// writes what it reads), where a norm in place over h ran on one
	// worker with a barrier after it.
	lh := l.Alloc(accel.F32, R, c.Dim)
	l.GatherRows(lh, h, last)
	if region != nil {
		region.Release(l)
	}
	lx := l.Alloc(accel.F32, R, c.Dim)
	l.RMSNorm(lx, lh, m.final, float32(c.NormEps))
	l.Free(lh)
	logits := l.Alloc(accel.F32, R, c.Vocab)
	l.MatMul(logits, lx, m.cls)
	next := l.Alloc(accel.I32, 1, R)
	logprobs := engine.KeyHas(b.Key, engine.KeyLogProbs)
	if engine.KeyHas(b.Key, engine.KeyPenalties) {
		// Log probabilities and the logits output are the raw ones (as
		// vLLM reports by default): process a copy when they are asked.
		proc := logits
		if logprobs || m.opts.Logits {
			proc = l.Alloc(accel.F32, R, c.Vocab)
		}
		l.Penalize(proc, logits, b.Penalties)
		l.Sample(next, proc, b.Sample)
		l.CountTokens(b.Penalties.Counts, b.Penalties.Rows, next)
		if proc != logits {
			l.Free(proc)
		}
	} else {
		l.Sample(next, logits, b.Sample)
	}
	l.Free(x, lx)
	out := map[string]accel.Tensor{engine.OutputNext: next}
	if logprobs {
		k := min(engine.MaxTopLogProbs, c.Vocab)
		vals, ids := l.Alloc(accel.F32, R, k+1), l.Alloc(accel.I32, R, k)
		l.LogProbs(vals, ids, logits, next, k)
		out[engine.OutLogProbs], out[engine.OutLogProbIDs] = vals, ids
	}
	if m.opts.Logits {
		out[engine.OutputLogits] = logits
	} else {
		l.Free(logits)
	}
	return out, l.Err()
}

// RegionForward implements engine.RegionModel: the block loop over a copy of
// its input hidden states.
func (m *Model) RegionForward(l *accel.Launcher, label string, b *engine.Batch) (map[string]accel.Tensor, error) {
	if label != RegionBlocks {
		return nil, fmt.Errorf("llama: no region %q", label)
	}
	in, rows := b.In["x"], b.In["token_rows"]
	if in.Rows != b.Tokens || in.Cols != m.cfg.Dim || rows.Len() != b.Tokens || b.KV == nil {
		return nil, fmt.Errorf("llama: block region of %d tokens: inputs %v %v", b.Tokens, in, rows)
	}
	h := l.Alloc(accel.F32, b.Tokens, m.cfg.Dim)
	l.Copy(h, in)
	m.blocks(l, h, rows, b)
	return map[string]accel.Tensor{"x": h}, l.Err()
}

// blocks runs the transformer layers over the hidden states x, in place.
// Biases and q/k norms run where the layer has them: the weights declare
// the architecture.
func (m *Model) blocks(l *accel.Launcher, x, rows accel.Tensor, b *engine.Batch) {
	c := m.cfg
	T := x.Rows
	d, qd, kvd, hd := c.Dim, c.QDim(), c.KVDim(), c.HeadSize()
	eps := float32(c.NormEps)
	sh := accel.AttentionShape{Heads: c.Heads, KVHeads: c.KVHeads, HeadSize: hd, PageSize: b.KV.PageSize}
	xb := l.Alloc(accel.F32, T, d)
	xb2 := l.Alloc(accel.F32, T, d)
	q := l.Alloc(accel.F32, T, qd)
	// The attention's output has a buffer of its own, though with
	// head_dim × heads = dim it could share xb: in a replayed step each
	// worker attends with the heads whose q, k and v it projected, and
	// writing those heads' outputs into xb while the other worker still
	// reads xb for its projections would need a barrier between the two
	// (accel/cpu's static schedule), one per layer.
	att := l.Alloc(accel.F32, T, qd)
	k := l.Alloc(accel.F32, T, kvd)
	v := l.Alloc(accel.F32, T, kvd)
	hb := l.Alloc(accel.F32, T, c.Hidden)
	hb2 := l.Alloc(accel.F32, T, c.Hidden)
	for i, ly := range m.layers {
		l.RMSNorm(xb, x, ly.rmsAtt, eps)
		l.MatMul(q, xb, ly.wq)
		l.MatMul(k, xb, ly.wk)
		l.MatMul(v, xb, ly.wv)
		if !ly.bq.IsNil() {
			l.AddRow(q, q, ly.bq)
			l.AddRow(k, k, ly.bk)
			l.AddRow(v, v, ly.bv)
		}
		if !ly.qNorm.IsNil() {
			// Each head on its own (Qwen3Attention's q_norm and k_norm),
			// before the rotation: RMSNorm over the [T·heads, hd] view.
			qh, kh := q.Reshape(T*c.Heads, hd), k.Reshape(T*c.KVHeads, hd)
			l.RMSNorm(qh, qh, ly.qNorm, eps)
			l.RMSNorm(kh, kh, ly.kNorm, eps)
		}
		// Interleaved pairs: the loader stores rotate-half heads
		// (Hugging Face's q and k) permuted into them.
		l.RoPETable(q, k, b.Pos, m.freqs, hd, accel.RoPEInterleaved)
		l.KVWrite(b.KV.K[i], b.KV.V[i], k, v, b.KV.Slots)
		l.Attention(att, q, b.KV.K[i], b.KV.V[i], rows, b.Pos, b.KV.Pages, sh)
		l.MatMul(xb2, att, ly.wo)
		l.Add(x, x, xb2)
		l.RMSNorm(xb, x, ly.rmsFFN, eps)
		l.MatMul(hb, xb, ly.w1)
		l.MatMul(hb2, xb, ly.w3)
		l.SiLUMul(hb, hb, hb2)
		l.MatMul(xb, hb, ly.w2)
		l.Add(x, x, xb)
	}
	l.Free(xb, xb2, q, att, k, v, hb, hb2)
}

// BF16Bytes rounds float32s to bfloat16 (to nearest, ties to even) and
// encodes them little-endian.
func BF16Bytes(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		u := BF16(x)
		b[2*i], b[2*i+1] = byte(u), byte(u>>8)
	}
	return b
}

// BF16 rounds a float32 to bfloat16, to nearest with ties to even; NaN stays
// NaN.
func BF16(x float32) uint16 {
	u := math.Float32bits(x)
	if x != x {
		return uint16(u>>16) | 0x40
	}
	u += 0x7FFF + (u>>16)&1
	return uint16(u >> 16)
}
