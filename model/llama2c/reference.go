package llama2c

import (
	"fmt"
	"math"
	"strings"
)

// Reference is a deliberately plain float32 forward pass of a llama2.c model
// over a single sequence, a transliteration of run.c's forward, used as a test
// oracle. Every float32 operation happens in the C program's order with the
// C program's rounding (products are rounded before they are accumulated, so
// no multiply-add is ever fused), which makes its logits bit-identical with
// the reference program's up to the last-bit differences of the C library's
// expf, sinf, cosf and powf (see the package documentation). It keeps a
// key/value cache of SeqLen positions. A Reference is not safe for concurrent
// use.
type Reference struct {
	c   *Checkpoint
	cfg Config

	x, xb, xb2 []float32 // [dim] activations
	hb, hb2    []float32 // [hidden] feed-forward activations
	q          []float32 // [dim] query
	att        []float32 // [seq_len] attention scores of one head
	logits     []float32 // [vocab]
	keyCache   []float32 // [layers][seq_len][kv_dim]
	valueCache []float32 // [layers][seq_len][kv_dim]
}

// NewReference returns a Reference for c with an empty cache. It panics if c
// is inconsistent (an invalid Config or an array of the wrong length; a
// Checkpoint from ReadCheckpoint is always consistent) or if its key/value
// cache (2 x layers x seq_len x kv_dim floats) would exceed 1<<32 floats.
func NewReference(c *Checkpoint) *Reference {
	if err := c.check(); err != nil {
		panic(err)
	}
	cfg := c.Config
	if n := cfg.kvCacheFloats(); n > maxParams {
		panic(fmt.Sprintf("llama2c: NewReference (%v): the key/value cache would hold %d floats, more than the limit %d",
			cfg, n, int64(maxParams)))
	}
	cache := cfg.Layers * cfg.SeqLen * cfg.KVDim()
	return &Reference{
		c:          c,
		cfg:        cfg,
		x:          make([]float32, cfg.Dim),
		xb:         make([]float32, cfg.Dim),
		xb2:        make([]float32, cfg.Dim),
		hb:         make([]float32, cfg.Hidden),
		hb2:        make([]float32, cfg.Hidden),
		q:          make([]float32, cfg.Dim),
		att:        make([]float32, cfg.SeqLen),
		logits:     make([]float32, cfg.Vocab),
		keyCache:   make([]float32, cache),
		valueCache: make([]float32, cache),
	}
}

// Reset clears the key/value cache, starting a new sequence. (Forward at
// position pos only reads cache positions 0..pos, all written by the calls
// for those positions, so Reset is needed only for hygiene.)
func (r *Reference) Reset() {
	clear(r.keyCache)
	clear(r.valueCache)
}

// Forward runs token through the model at position pos of the sequence,
// storing its key and value in the cache at pos and attending over positions
// 0..pos, and returns the logits over the vocabulary in a fresh slice. It
// panics unless 0 <= token < Vocab and 0 <= pos < SeqLen.
func (r *Reference) Forward(token, pos int) []float32 {
	cfg := r.cfg
	if token < 0 || token >= cfg.Vocab {
		panic(fmt.Sprintf("llama2c: Forward: token %d out of range [0, %d)", token, cfg.Vocab))
	}
	if pos < 0 || pos >= cfg.SeqLen {
		panic(fmt.Sprintf("llama2c: Forward: position %d out of range [0, %d)", pos, cfg.SeqLen))
	}
	c := r.c
	dim, hidden := cfg.Dim, cfg.Hidden
	kvDim, headSize := cfg.KVDim(), cfg.HeadSize()
	kvMul := cfg.Heads / cfg.KVHeads
	x := r.x

	copy(x, c.TokenEmbedding[token*dim:(token+1)*dim])

	for l := range cfg.Layers {
		w := &c.Layers[l]
		rmsnorm(r.xb, x, w.RMSAtt)

		loff := l * cfg.SeqLen * kvDim
		k := r.keyCache[loff+pos*kvDim : loff+(pos+1)*kvDim]
		v := r.valueCache[loff+pos*kvDim : loff+(pos+1)*kvDim]
		matmul(r.q, r.xb, w.WQ)
		matmul(k, r.xb, w.WK)
		matmul(v, r.xb, w.WV)

		// RoPE: rotate pairs (i, i+1) of q, and of k while i < kvDim.
		for i := 0; i < dim; i += 2 {
			headDim := i % headSize
			freq := 1 / float32(math.Pow(10000, float64(float32(headDim)/float32(headSize))))
			val := float32(pos) * freq
			fcr := float32(math.Cos(float64(val)))
			fci := float32(math.Sin(float64(val)))
			rotate(r.q, i, fcr, fci)
			if i < kvDim {
				rotate(k, i, fcr, fci)
			}
		}

		// Grouped-query attention, head by head.
		scale := float32(math.Sqrt(float64(float32(headSize))))
		for h := range cfg.Heads {
			q := r.q[h*headSize : (h+1)*headSize]
			att := r.att[:pos+1]
			kvOff := loff + (h/kvMul)*headSize
			for t := range att {
				kt := r.keyCache[kvOff+t*kvDim : kvOff+t*kvDim+headSize]
				score := float32(0)
				for i, qi := range q {
					score += float32(qi * kt[i])
				}
				att[t] = score / scale
			}
			softmax(att)
			xb := r.xb[h*headSize : (h+1)*headSize]
			clear(xb)
			for t, a := range att {
				vt := r.valueCache[kvOff+t*kvDim : kvOff+t*kvDim+headSize]
				for i := range xb {
					xb[i] += float32(a * vt[i])
				}
			}
		}
		matmul(r.xb2, r.xb, w.WO)
		for i := range x {
			x[i] += r.xb2[i]
		}

		// SwiGLU feed-forward: w2(silu(w1 x) * (w3 x)).
		rmsnorm(r.xb, x, w.RMSFFN)
		matmul(r.hb, r.xb, w.W1)
		matmul(r.hb2, r.xb, w.W3)
		for i := range hidden {
			val := r.hb[i]
			e := float32(math.Exp(float64(-val)))
			sig := 1 / (1 + e)
			val = val * sig
			val = val * r.hb2[i]
			r.hb[i] = val
		}
		matmul(r.xb, r.hb, w.W2)
		for i := range x {
			x[i] += r.xb[i]
		}
	}
	rmsnorm(x, x, c.RMSFinal)
	matmul(r.logits, x, c.classifier())
	return append([]float32(nil), r.logits...)
}

// rotate applies the RoPE rotation by (fcr, fci) to vec[i], vec[i+1], rounding
// each product to float32 before the subtraction or addition, as C does.
func rotate(vec []float32, i int, fcr, fci float32) {
	v0, v1 := vec[i], vec[i+1]
	vec[i] = float32(v0*fcr) - float32(v1*fci)
	vec[i+1] = float32(v0*fci) + float32(v1*fcr)
}

// matmul computes out = W x for W of shape [len(out)][len(x)], summing each
// row sequentially in float32 with every product rounded first.
func matmul(out, x, w []float32) {
	n := len(x)
	for i := range out {
		row := w[i*n : (i+1)*n]
		val := float32(0)
		for j, wj := range row {
			val += float32(wj * x[j])
		}
		out[i] = val
	}
}

// rmsnorm computes out = weight * (x / rms(x)) as run.c does:
// ss = 1/sqrtf(mean(x*x) + 1e-5), out[j] = weight[j] * (ss * x[j]).
// out may be x.
func rmsnorm(out, x, weight []float32) {
	ss := float32(0)
	for _, v := range x {
		ss += float32(v * v)
	}
	ss /= float32(len(x))
	ss += float32(1e-5)
	ss = 1 / float32(math.Sqrt(float64(ss)))
	for j := range x {
		out[j] = weight[j] * float32(ss*x[j])
	}
}

// softmax normalises x in place: subtract the (sequential) maximum,
// exponentiate, divide by the sequential float32 sum.
func softmax(x []float32) {
	maxVal := x[0]
	for _, v := range x[1:] {
		if v > maxVal {
			maxVal = v
		}
	}
	sum := float32(0)
	for i, v := range x {
		e := float32(math.Exp(float64(v - maxVal)))
		x[i] = e
		sum += e
	}
	for i := range x {
		x[i] /= sum
	}
}

// argmax returns the first index of the maximum of v (strict >, as run.c's
// sample_argmax).
func argmax(v []float32) int {
	best, bestVal := 0, v[0]
	for i := 1; i < len(v); i++ {
		if v[i] > bestVal {
			best, bestVal = i, v[i]
		}
	}
	return best
}

// Generate reproduces the stdout of llama2.c's run program at temperature 0
// (greedy decoding) for prompt and steps: the prompt is encoded with BOS and
// no EOS; at each position the next token is the next prompt token while the
// prompt lasts, then the argmax of the logits; generation stops after steps
// positions (BOS and prompt included) or when the next token is BOS; every
// token is printed with SafePiece(previous, next); a final newline ends the
// output. steps <= 0 or steps > SeqLen means SeqLen. It panics if the
// tokenizer yields a token outside the model's vocabulary.
func Generate(c *Checkpoint, t *Tokenizer, prompt string, steps int) string {
	if steps <= 0 || steps > c.Config.SeqLen {
		steps = c.Config.SeqLen
	}
	r := NewReference(c)
	tokens := t.Encode(prompt, true, false)
	var out strings.Builder
	token := tokens[0]
	for pos := 0; pos < steps; {
		logits := r.Forward(token, pos)
		var next int
		if pos < len(tokens)-1 {
			next = tokens[pos+1]
		} else {
			next = argmax(logits)
		}
		pos++
		if next == BOS {
			break
		}
		out.Write(t.SafePiece(token, next))
		token = next
	}
	out.WriteByte('\n')
	return out.String()
}
