package accel

import (
	"fmt"
	"math"
)

// Op names a kernel. Its semantics are defined here, once, for every backend;
// each backend implements every Op. Operands are Tensors in Call.T (outputs
// first), integer parameters in Call.I and float parameters in Call.F, in the
// order each Op's comment gives.
type Op uint8

// The kernels of a Llama-family decoder. T is the number of tokens in a step,
// R the number of rows (requests), D the model width.
const (
	// OpFill: T0 (F32 or I32) = F0 (F32) or I0 (I32) everywhere.
	OpFill Op = iota + 1
	// OpEmbed: T0 out[T,D] F32 = T1 table[V,D] (F32|BF16) rows chosen by
	// T2 ids (T elements, I32). An id outside [0,V) gives a zero row.
	OpEmbed
	// OpRMSNorm: T0 out[T,D] = T1 x[T,D] / rms(x) * T2 w[1,D]; F0 eps.
	// out may be x.
	OpRMSNorm
	// OpMatMul: T0 y[T,O] = T1 x[T,I] · T2 Wᵀ with W[O,I] (F32|BF16|Q8_0|
	// Q4_0|Q4_K|Q6_K) row-major out x in. y must not overlap x. With a
	// quantized W (ggml blocks along I), y is the product with W's
	// dequantised values up to the backend's rounding: a backend may
	// quantize each row of x per block to 8 bits first, as ggml's CPU code
	// does (the CPU device does: see accel/cpu), or dequantise W's blocks
	// into float32 (the GPU backends do). Either way a row's result does
	// not depend on the other rows.
	OpMatMul
	// OpRoPE rotates, in place, pairs (2i, 2i+1) of every head of T0 q[T,Hq*hd]
	// and T1 k[T,Hk*hd] by angle pos·θ^(-2i/hd), pos from T2 (T elements,
	// I32); I0 head size hd, F0 θ.
	OpRoPE
	// OpKVWrite: T0 kcache[S,KVD][T4 slot[t]] = T2 k[T,KVD][t] and likewise
	// T1 vcache from T3 v. T4 slots has T elements (I32); a slot outside [0,S)
	// writes nothing. The caches are both F32 or both F16 (where the
	// device's Capability has KVCacheF16); into F16 each element is rounded
	// to the nearest binary16, ties to even (quant.FloatToHalf), values
	// beyond its range becoming infinities.
	OpKVWrite
	// OpAttention: causal grouped-query attention over a paged KV cache.
	// T0 out[T,H*hd], T1 q[T,H*hd], T2 kcache[S,KVH*hd], T3 vcache[S,KVH*hd],
	// T4 row of each token (T, I32), T5 position of each token (T, I32),
	// T6 page table [R,P] (I32). I0 H, I1 KVH, I2 hd, I3 page size.
	// Token t of row r = T4[t] at position n = T5[t] attends to positions
	// 0..n of r, position p living in slot T6[r][p/page]*page + p%page.
	// Query head h reads KV head h/(H/KVH). A token whose row, position or
	// pages are out of range gets a zero output. F16 caches (as OpKVWrite's)
	// are widened exactly: the output is the output over F32 caches holding
	// the widened values (bit for bit on a Deterministic device).
	OpAttention
	// OpSiLUMul: T0 out = silu(T1 a) * T2 b, elementwise. out may be a or b.
	OpSiLUMul
	// OpAdd: T0 out = T1 a + T2 b, elementwise. out may be a or b.
	OpAdd
	// OpGatherRows: T0 out[R,D] = T1 x[T,D] rows T2 idx (R, I32). An index
	// outside [0,T) gives a zero row.
	OpGatherRows
	// OpArgmax: T0 out (R, I32) = the first index of the maximum of each row
	// of T1 x[R,V].
	OpArgmax
	// OpSample draws one token per row of T1 logits[R,V] into T0 out (R, I32).
	// Per row: T2 temperature (F32), T3 top-k (I32, <= 0: off), T4 top-p (F32,
	// >= 1: off), T5 seed [R,2] (I32: low and high halves), T6 RNG offset
	// (I32). Temperature <= 0 is the argmax. The draw is a pure function of
	// (logits, parameters, seed, offset): see SampleUniform. With top-k or
	// top-p on, which token a given draw lands on is the device's: the CPU
	// device walks the kept tokens from the most probable down, as the
	// llama2.c reference does; the GPU backends walk them in index order.
	// Both draw from the same distribution.
	OpSample
	// OpRoPETable rotates, in place, the pairs of every head of T0
	// q[T,Hq*hd] and T1 k[T,Hk*hd] like OpRoPE, but pair i of a head turns
	// by angle pos·T3[i], pos from T2 (T elements, I32) and T3 freqs [1,hd/2]
	// (F32) one frequency per pair, made on the host (RoPEFreqs, or a
	// scaled table such as Llama 3's). I0 head size hd; I1 the pair layout
	// (RoPELayout): RoPEInterleaved pairs elements (2i, 2i+1) as OpRoPE,
	// llama2.c and GGUF's llama do, RoPEHalves pairs (i, i+hd/2), the
	// rotate-half form of Hugging Face's checkpoints (GPT-NeoX style).
	// Each pair (a, b) becomes (a·cos − b·sin, a·sin + b·cos), the angle
	// float32(pos)·freq rounded to float32. With the RoPEFreqs table and
	// interleaved pairs its results are OpRoPE's, bit for bit.
	OpRoPETable
	// OpAddRow: T0 out[T,N] = T1 x[T,N] + T2 b[1,N], the row b added to
	// every row of x (a bias). out may be x.
	OpAddRow
	// OpLogProbs scores a step's tokens: per row of T2 logits[R,V] (F32),
	// the log-softmax lp(i) = x(i) - max(x) - log Σ exp(x(j) - max(x)).
	// T0 vals[R,K+1] F32 gets lp of T3 tokens (R, I32) in column 0 (-Inf for
	// a token outside [0,V)) and the K largest lp, largest first, in columns
	// 1..K; T1 ids[R,K] I32 their tokens. Equal lp are ordered by token,
	// lower first. I0 is K (1 <= K <= V).
	OpLogProbs
	// OpPenalize processes logits before sampling, as vLLM does: min_tokens,
	// logit_bias, the repetition, frequency and presence penalties, then
	// min_p. T0 out[R,V] F32 (may be T1), T1 logits[R,V] F32, T2 counts[N,V]
	// I32 and T3 bias[N,V] F32 (per-request rows of a pool), T4 rows[R,2]
	// I32 (each row's pool row, outside [0,N): none; its flags:
	// PenaltyMaskStops, PenaltyNoBias), T5
	// params[R,4] F32 (repetition, presence, frequency, min_p), T6
	// temperature (R, F32). See PenaltyCountMask for the counts' layout
	// and Penalize for the arithmetic.
	OpPenalize
	// OpCountTokens counts sampled tokens into the pool OpPenalize reads:
	// T0 counts[N,V] I32 gets 1 added at [T1 rows[r,0], T2 tokens[r]] for
	// each row r whose pool row is in [0,N) and token in [0,V). Rows with
	// a pool row must each have their own.
	OpCountTokens
	numOps
)

// MaxOperands is the most tensors a Call carries.
const MaxOperands = 7

// Call is one kernel launch: an Op and its operands. Backends record Calls
// in graphs; a Call is small and copied by value.
type Call struct {
	Op Op
	T  [MaxOperands]Tensor
	I  [4]int
	F  [2]float32
}

type opSpec struct {
	name     string
	check    func(c *Call) error
	tensors  int
	writeIdx []int // operands the op writes
}

var opSpecs = [numOps]opSpec{
	OpFill:        {name: "fill", tensors: 1, writeIdx: []int{0}, check: checkFill},
	OpEmbed:       {name: "embed", tensors: 3, writeIdx: []int{0}, check: checkEmbed},
	OpRMSNorm:     {name: "rmsnorm", tensors: 3, writeIdx: []int{0}, check: checkRMSNorm},
	OpMatMul:      {name: "matmul", tensors: 3, writeIdx: []int{0}, check: checkMatMul},
	OpRoPE:        {name: "rope", tensors: 3, writeIdx: []int{0, 1}, check: checkRoPE},
	OpKVWrite:     {name: "kv_write", tensors: 5, writeIdx: []int{0, 1}, check: checkKVWrite},
	OpAttention:   {name: "attention", tensors: 7, writeIdx: []int{0}, check: checkAttention},
	OpSiLUMul:     {name: "silu_mul", tensors: 3, writeIdx: []int{0}, check: checkElementwise},
	OpAdd:         {name: "add", tensors: 3, writeIdx: []int{0}, check: checkElementwise},
	OpGatherRows:  {name: "gather_rows", tensors: 3, writeIdx: []int{0}, check: checkGatherRows},
	OpArgmax:      {name: "argmax", tensors: 2, writeIdx: []int{0}, check: checkArgmax},
	OpSample:      {name: "sample", tensors: 7, writeIdx: []int{0}, check: checkSample},
	OpRoPETable:   {name: "rope_table", tensors: 4, writeIdx: []int{0, 1}, check: checkRoPETable},
	OpAddRow:      {name: "add_row", tensors: 3, writeIdx: []int{0}, check: checkAddRow},
	OpLogProbs:    {name: "logprobs", tensors: 4, writeIdx: []int{0, 1}, check: checkLogProbs},
	OpPenalize:    {name: "penalize", tensors: 7, writeIdx: []int{0}, check: checkPenalize},
	OpCountTokens: {name: "count_tokens", tensors: 3, writeIdx: []int{0}, check: checkCountTokens},
}

func (o Op) String() string {
	if o > 0 && o < numOps {
		return opSpecs[o].name
	}
	return fmt.Sprintf("op(%d)", o)
}

// NumOps is one more than the largest Op, for backends' dispatch tables.
const NumOps = int(numOps)

// Validate checks a call's operands against its Op: dtypes, shapes, that
// every operand starts on an element boundary, and that no output overlaps an
// input it must not. Backends call it before launching or recording; an
// invalid call is an error wrapping ErrInvalidArgument.
func (c *Call) Validate() error {
	if c.Op == 0 || c.Op >= numOps {
		return fmt.Errorf("accel: unknown op %d: %w", c.Op, ErrInvalidArgument)
	}
	sp := &opSpecs[c.Op]
	for i := 0; i < sp.tensors; i++ {
		t := c.T[i]
		if t.IsNil() {
			return fmt.Errorf("accel: %s: operand %d is nil: %w", sp.name, i, ErrInvalidArgument)
		}
		if t.Rows < 0 || t.Cols < 0 || t.Bytes() > t.Buf.Len() {
			return fmt.Errorf("accel: %s: operand %d %v does not fit its %d-byte buffer: %w",
				sp.name, i, t, t.Buf.Len(), ErrInvalidArgument)
		}
		if sz := t.DType.Size(); sz > 1 && t.Buf.Offset()%sz != 0 {
			return fmt.Errorf("accel: %s: operand %d starts at byte %d of its allocation, not on a %d-byte element boundary: %w",
				sp.name, i, t.Buf.Offset(), sz, ErrInvalidArgument)
		}
	}
	if err := sp.check(c); err != nil {
		return fmt.Errorf("accel: %s: %w: %w", sp.name, err, ErrInvalidArgument)
	}
	return nil
}

// ValidateFor is Validate, then whether a device of capability capab runs
// the call: F16 KV caches need KVCacheF16 (ErrUnsupported without it).
func (c *Call) ValidateFor(capab Capability) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Op == OpKVWrite || c.Op == OpAttention {
		kc := c.T[0]
		if c.Op == OpAttention {
			kc = c.T[2]
		}
		if kc.DType == F16 && !capab.KVCacheF16 {
			return fmt.Errorf("accel: %s: f16 KV cache: %w", opSpecs[c.Op].name, ErrUnsupported)
		}
	}
	return nil
}

// Writes reports the operand indices the call writes.
func (c *Call) Writes() []int { return opSpecs[c.Op].writeIdx }

// Operands is the number of tensors the call's Op uses.
func (c *Call) Operands() int { return opSpecs[c.Op].tensors }

func want(t Tensor, what string, dts ...DType) error {
	for _, d := range dts {
		if t.DType == d {
			return nil
		}
	}
	return fmt.Errorf("%s is %s, want %v", what, t.DType, dts)
}

func checkFill(c *Call) error { return want(c.T[0], "out", F32, I32) }

func checkEmbed(c *Call) error {
	out, table, ids := c.T[0], c.T[1], c.T[2]
	if err := firstErr(want(out, "out", F32), want(table, "table", F32, BF16), want(ids, "ids", I32)); err != nil {
		return err
	}
	if out.Cols != table.Cols || out.Rows != ids.Len() {
		return fmt.Errorf("out %v, table %v, ids %v", out, table, ids)
	}
	return nil
}

func checkRMSNorm(c *Call) error {
	out, x, w := c.T[0], c.T[1], c.T[2]
	if err := firstErr(want(out, "out", F32), want(x, "x", F32), want(w, "w", F32)); err != nil {
		return err
	}
	if out.Rows != x.Rows || out.Cols != x.Cols || w.Len() != x.Cols {
		return fmt.Errorf("out %v, x %v, w %v", out, x, w)
	}
	if out.Buf.Overlaps(x.Buf) && out.Buf != x.Buf {
		return fmt.Errorf("out partly overlaps x")
	}
	return nil
}

func checkMatMul(c *Call) error {
	y, x, w := c.T[0], c.T[1], c.T[2]
	if err := firstErr(want(y, "y", F32), want(x, "x", F32), want(w, "w", F32, BF16, Q8_0, Q4_0, Q4_K, Q6_K)); err != nil {
		return err
	}
	if bs := w.DType.BlockSize(); bs > 1 && w.Cols%bs != 0 {
		return fmt.Errorf("w %v: %d columns are not whole blocks of %d", w, w.Cols, bs)
	}
	if y.Rows != x.Rows || x.Cols != w.Cols || y.Cols != w.Rows {
		return fmt.Errorf("y %v = x %v · wᵀ %v", y, x, w)
	}
	if y.Buf.Overlaps(x.Buf) || y.Buf.Overlaps(w.Buf) {
		return fmt.Errorf("y overlaps an input")
	}
	return nil
}

func checkRoPE(c *Call) error {
	q, k, pos := c.T[0], c.T[1], c.T[2]
	if err := firstErr(want(q, "q", F32), want(k, "k", F32), want(pos, "pos", I32)); err != nil {
		return err
	}
	hd := c.I[0]
	if hd <= 0 || hd%2 != 0 || q.Cols%hd != 0 || k.Cols%hd != 0 {
		return fmt.Errorf("head size %d for q %v, k %v", hd, q, k)
	}
	if q.Rows != pos.Len() || k.Rows != pos.Len() {
		return fmt.Errorf("q %v, k %v, pos %v", q, k, pos)
	}
	if q.Buf.Overlaps(k.Buf) {
		return fmt.Errorf("q overlaps k")
	}
	return nil
}

// RoPELayout is how OpRoPETable pairs the elements of a head.
type RoPELayout int

// The pair layouts of OpRoPETable.
const (
	// RoPEInterleaved pairs elements (2i, 2i+1) of a head.
	RoPEInterleaved RoPELayout = 0
	// RoPEHalves pairs elements (i, i+hd/2) of a head.
	RoPEHalves RoPELayout = 1
)

func (l RoPELayout) String() string {
	switch l {
	case RoPEInterleaved:
		return "interleaved"
	case RoPEHalves:
		return "halves"
	}
	return fmt.Sprintf("RoPELayout(%d)", int(l))
}

func checkRoPETable(c *Call) error {
	if err := checkRoPE(c); err != nil {
		return err
	}
	freqs := c.T[3]
	if err := want(freqs, "freqs", F32); err != nil {
		return err
	}
	if hd := c.I[0]; freqs.Len() != hd/2 {
		return fmt.Errorf("freqs %v for head size %d: want %d frequencies", freqs, hd, hd/2)
	}
	if l := RoPELayout(c.I[1]); l != RoPEInterleaved && l != RoPEHalves {
		return fmt.Errorf("pair layout %v", l)
	}
	for i, t := range c.T[:2] {
		if t.Buf.Overlaps(freqs.Buf) {
			return fmt.Errorf("operand %d overlaps freqs", i)
		}
	}
	return nil
}

func checkAddRow(c *Call) error {
	out, x, b := c.T[0], c.T[1], c.T[2]
	if err := firstErr(want(out, "out", F32), want(x, "x", F32), want(b, "b", F32)); err != nil {
		return err
	}
	if out.Rows != x.Rows || out.Cols != x.Cols || b.Len() != x.Cols {
		return fmt.Errorf("out %v, x %v, b %v", out, x, b)
	}
	if out.Buf.Overlaps(x.Buf) && out.Buf != x.Buf {
		return fmt.Errorf("out partly overlaps x")
	}
	if out.Buf.Overlaps(b.Buf) {
		return fmt.Errorf("out overlaps b")
	}
	return nil
}

// checkCaches: a KV cache pair is F32 or F16, both the same.
func checkCaches(kc, vc Tensor) error {
	if err := want(kc, "kcache", F32, F16); err != nil {
		return err
	}
	if vc.DType != kc.DType {
		return fmt.Errorf("vcache is %s, kcache %s", vc.DType, kc.DType)
	}
	return nil
}

func checkKVWrite(c *Call) error {
	kc, vc, k, v, slots := c.T[0], c.T[1], c.T[2], c.T[3], c.T[4]
	if err := firstErr(checkCaches(kc, vc), want(k, "k", F32),
		want(v, "v", F32), want(slots, "slots", I32)); err != nil {
		return err
	}
	if kc.Cols != k.Cols || vc.Cols != v.Cols || kc.Rows != vc.Rows || k.Rows != slots.Len() || v.Rows != slots.Len() {
		return fmt.Errorf("kcache %v, vcache %v, k %v, v %v, slots %v", kc, vc, k, v, slots)
	}
	return nil
}

func checkAttention(c *Call) error {
	out, q, kc, vc, rows, pos, pages := c.T[0], c.T[1], c.T[2], c.T[3], c.T[4], c.T[5], c.T[6]
	if err := firstErr(want(out, "out", F32), want(q, "q", F32), checkCaches(kc, vc),
		want(rows, "rows", I32), want(pos, "pos", I32), want(pages, "pages", I32)); err != nil {
		return err
	}
	h, kvh, hd, page := c.I[0], c.I[1], c.I[2], c.I[3]
	if h <= 0 || kvh <= 0 || hd <= 0 || page <= 0 || h%kvh != 0 {
		return fmt.Errorf("heads %d, kv heads %d, head size %d, page %d", h, kvh, hd, page)
	}
	if q.Cols != h*hd || out.Cols != h*hd || kc.Cols != kvh*hd || vc.Cols != kvh*hd || kc.Rows != vc.Rows {
		return fmt.Errorf("out %v, q %v, kcache %v, vcache %v for %d heads, %d kv heads of %d", out, q, kc, vc, h, kvh, hd)
	}
	if out.Rows != q.Rows || rows.Len() != q.Rows || pos.Len() != q.Rows {
		return fmt.Errorf("out %v, q %v, rows %v, pos %v", out, q, rows, pos)
	}
	if kc.Rows%page != 0 {
		return fmt.Errorf("cache of %d slots is not whole pages of %d", kc.Rows, page)
	}
	if out.Buf.Overlaps(q.Buf) {
		return fmt.Errorf("out overlaps q")
	}
	return nil
}

func checkElementwise(c *Call) error {
	out, a, b := c.T[0], c.T[1], c.T[2]
	if err := firstErr(want(out, "out", F32), want(a, "a", F32), want(b, "b", F32)); err != nil {
		return err
	}
	if out.Len() != a.Len() || a.Len() != b.Len() {
		return fmt.Errorf("out %v, a %v, b %v", out, a, b)
	}
	for _, in := range []Tensor{a, b} {
		if out.Buf.Overlaps(in.Buf) && out.Buf != in.Buf {
			return fmt.Errorf("out partly overlaps an input")
		}
	}
	return nil
}

func checkGatherRows(c *Call) error {
	out, x, idx := c.T[0], c.T[1], c.T[2]
	if err := firstErr(want(out, "out", F32), want(x, "x", F32), want(idx, "idx", I32)); err != nil {
		return err
	}
	if out.Cols != x.Cols || out.Rows != idx.Len() {
		return fmt.Errorf("out %v, x %v, idx %v", out, x, idx)
	}
	if out.Buf.Overlaps(x.Buf) {
		return fmt.Errorf("out overlaps x")
	}
	return nil
}

func checkArgmax(c *Call) error {
	out, x := c.T[0], c.T[1]
	if err := firstErr(want(out, "out", I32), want(x, "x", F32)); err != nil {
		return err
	}
	if out.Len() != x.Rows || x.Cols == 0 {
		return fmt.Errorf("out %v, x %v", out, x)
	}
	return nil
}

func checkSample(c *Call) error {
	out, logits, temp, topk, topp, seed, off := c.T[0], c.T[1], c.T[2], c.T[3], c.T[4], c.T[5], c.T[6]
	if err := firstErr(want(out, "out", I32), want(logits, "logits", F32), want(temp, "temperature", F32),
		want(topk, "top-k", I32), want(topp, "top-p", F32), want(seed, "seed", I32), want(off, "offset", I32)); err != nil {
		return err
	}
	r := logits.Rows
	if out.Len() != r || temp.Len() != r || topk.Len() != r || topp.Len() != r || seed.Len() != 2*r || off.Len() != r || logits.Cols == 0 {
		return fmt.Errorf("out %v, logits %v, temperature %v, top-k %v, top-p %v, seed %v, offset %v",
			out, logits, temp, topk, topp, seed, off)
	}
	return nil
}

func checkLogProbs(c *Call) error {
	vals, ids, logits, toks := c.T[0], c.T[1], c.T[2], c.T[3]
	if err := firstErr(want(vals, "vals", F32), want(ids, "ids", I32), want(logits, "logits", F32), want(toks, "tokens", I32)); err != nil {
		return err
	}
	k, r := c.I[0], logits.Rows
	if k < 1 || k > logits.Cols {
		return fmt.Errorf("top %d of %d logits", k, logits.Cols)
	}
	if vals.Rows != r || vals.Cols != k+1 || ids.Rows != r || ids.Cols != k || toks.Len() != r {
		return fmt.Errorf("vals %v, ids %v, logits %v, tokens %v for top %d", vals, ids, logits, toks, k)
	}
	if vals.Buf.Overlaps(logits.Buf) || ids.Buf.Overlaps(logits.Buf) || vals.Buf.Overlaps(ids.Buf) {
		return fmt.Errorf("outputs overlap")
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// SampleUniform is the random number every backend's OpSample draws for a row:
// a uniform float in [0, 1) that depends only on (seed, offset). It is a
// counter-based generator (SplitMix64 of seed and offset), so a captured
// sampler gives the same draw as eager for the same seed and offset, and a
// row's draw does not depend on the other rows.
func SampleUniform(seed uint64, offset uint32) float64 {
	z := seed + 0x9E3779B97F4A7C15*(uint64(offset)+1)
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// SplitSeed is how a 64-bit seed is stored in OpSample's seed operand.
func SplitSeed(seed uint64) (lo, hi int32) { return int32(uint32(seed)), int32(uint32(seed >> 32)) }

// JoinSeed undoes SplitSeed.
func JoinSeed(lo, hi int32) uint64 { return uint64(uint32(lo)) | uint64(uint32(hi))<<32 }

// RoPEFreqs is the table of OpRoPETable that gives OpRoPE's rotation: the
// RoPEFreq of each pair of a head of size hd.
func RoPEFreqs(hd int, theta float32) []float32 {
	f := make([]float32, hd/2)
	for i := range f {
		f[i] = RoPEFreq(2*i, hd, theta)
	}
	return f
}

// RoPEFreq is the rotation frequency of pair i (i even) of a head of size hd,
// computed in float32 as the reference implementation does.
func RoPEFreq(i, hd int, theta float32) float32 {
	return 1 / float32(math.Pow(float64(theta), float64(float32(i)/float32(hd))))
}
