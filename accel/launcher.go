package accel

// Launcher issues kernels onto one stream and keeps the first error, so that a
// forward reads as the sequence of kernels it is and checks once at the end
// (like bufio.Writer). After an error every later call is a no-op.
type Launcher struct {
	s   Stream
	err error
	c   Call
}

// On returns a Launcher for s.
func On(s Stream) *Launcher { return &Launcher{s: s} }

// Stream is the stream the launcher issues onto.
func (l *Launcher) Stream() Stream { return l.s }

// Err is the first error any call met.
func (l *Launcher) Err() error { return l.err }

// Fail records err (if it is the first) and returns the first error.
func (l *Launcher) Fail(err error) error {
	if l.err == nil {
		l.err = err
	}
	return l.err
}

func (l *Launcher) launch(op Op, t ...Tensor) *Call {
	l.c = Call{Op: op}
	copy(l.c.T[:], t)
	return &l.c
}

func (l *Launcher) run() {
	if l.err == nil {
		l.err = l.s.Launch(&l.c)
	}
}

// Alloc allocates a rows x cols tensor of dt in stream order (from the
// capture's pool while capturing).
func (l *Launcher) Alloc(dt DType, rows, cols int) Tensor {
	if l.err != nil {
		return Tensor{}
	}
	b, err := l.s.Alloc(int64(rows) * int64(cols) * dt.Size())
	if err != nil {
		l.err = err
		return Tensor{}
	}
	return Tensor{Buf: b, DType: dt, Rows: rows, Cols: cols}
}

// Free returns tensors from Alloc in stream order. Nil tensors are skipped.
func (l *Launcher) Free(ts ...Tensor) {
	for _, t := range ts {
		if t.IsNil() {
			continue
		}
		if err := l.s.Free(t.Buf); err != nil && l.err == nil {
			l.err = err
		}
	}
}

// Copy copies src into dst (equal sizes) on the device.
func (l *Launcher) Copy(dst, src Tensor) {
	if l.err == nil {
		l.err = l.s.Copy(dst.Buf.Slice(0, dst.Bytes()), src.Buf.Slice(0, src.Bytes()))
	}
}

// FillF32 sets every element of out to v.
func (l *Launcher) FillF32(out Tensor, v float32) {
	l.launch(OpFill, out).F[0] = v
	l.run()
}

// FillI32 sets every element of out to v.
func (l *Launcher) FillI32(out Tensor, v int) {
	l.launch(OpFill, out).I[0] = v
	l.run()
}

// Embed gathers table rows: out[t] = table[ids[t]].
func (l *Launcher) Embed(out, table, ids Tensor) { l.launch(OpEmbed, out, table, ids); l.run() }

// RMSNorm normalises each row of x and scales it by w.
func (l *Launcher) RMSNorm(out, x, w Tensor, eps float32) {
	l.launch(OpRMSNorm, out, x, w).F[0] = eps
	l.run()
}

// MatMul computes y = x·wᵀ.
func (l *Launcher) MatMul(y, x, w Tensor) { l.launch(OpMatMul, y, x, w); l.run() }

// RoPE rotates q and k in place by their tokens' positions.
func (l *Launcher) RoPE(q, k, pos Tensor, headSize int, theta float32) {
	c := l.launch(OpRoPE, q, k, pos)
	c.I[0], c.F[0] = headSize, theta
	l.run()
}

// RoPETable rotates q and k in place by their tokens' positions, pair i of
// a head by the frequency freqs[i], pairs laid out as layout says; see
// OpRoPETable.
func (l *Launcher) RoPETable(q, k, pos, freqs Tensor, headSize int, layout RoPELayout) {
	c := l.launch(OpRoPETable, q, k, pos, freqs)
	c.I[0], c.I[1] = headSize, int(layout)
	l.run()
}

// KVWrite scatters k and v into the caches at slots.
func (l *Launcher) KVWrite(kcache, vcache, k, v, slots Tensor) {
	l.launch(OpKVWrite, kcache, vcache, k, v, slots)
	l.run()
}

// AttentionShape is the head layout of OpAttention.
type AttentionShape struct {
	Heads, KVHeads, HeadSize, PageSize int
}

// Attention runs paged causal attention; see OpAttention.
func (l *Launcher) Attention(out, q, kcache, vcache, rows, pos, pages Tensor, sh AttentionShape) {
	c := l.launch(OpAttention, out, q, kcache, vcache, rows, pos, pages)
	c.I[0], c.I[1], c.I[2], c.I[3] = sh.Heads, sh.KVHeads, sh.HeadSize, sh.PageSize
	l.run()
}

// SiLUMul computes out = silu(a) * b.
func (l *Launcher) SiLUMul(out, a, b Tensor) { l.launch(OpSiLUMul, out, a, b); l.run() }

// Add computes out = a + b.
func (l *Launcher) Add(out, a, b Tensor) { l.launch(OpAdd, out, a, b); l.run() }

// AddRow computes out = x + b with the row b added to every row of x.
func (l *Launcher) AddRow(out, x, b Tensor) { l.launch(OpAddRow, out, x, b); l.run() }

// GatherRows selects rows: out[r] = x[idx[r]].
func (l *Launcher) GatherRows(out, x, idx Tensor) { l.launch(OpGatherRows, out, x, idx); l.run() }

// Argmax writes each row's first maximum index.
func (l *Launcher) Argmax(out, x Tensor) { l.launch(OpArgmax, out, x); l.run() }

// LogProbs scores tokens and the top k of each row of logits; see
// OpLogProbs.
func (l *Launcher) LogProbs(vals, ids, logits, tokens Tensor, k int) {
	c := l.launch(OpLogProbs, vals, ids, logits, tokens)
	c.I[0] = k
	l.run()
}

// SampleParams are OpSample's per-row parameter operands.
type SampleParams struct {
	Temperature, TopK, TopP, Seed, Offset Tensor
}

// Sample draws one token per row; see OpSample.
func (l *Launcher) Sample(out, logits Tensor, p SampleParams) {
	l.launch(OpSample, out, logits, p.Temperature, p.TopK, p.TopP, p.Seed, p.Offset)
	l.run()
}
