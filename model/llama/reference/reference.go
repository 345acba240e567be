package reference

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Llama3Scaling is config.json's rope_scaling of rope_type "llama3".
type Llama3Scaling struct {
	Factor                        float64 // "factor" (8 for Llama 3.1, 32 for 3.2)
	LowFreqFactor, HighFreqFactor float64 // "low_freq_factor", "high_freq_factor"
	OriginalMaxPositions          int     // "original_max_position_embeddings"
}

// Config is a decoder's shape and architecture.
type Config struct {
	Dim, Hidden, Layers int
	Heads, KVHeads      int
	HeadDim             int // head_dim; 0: Dim/Heads
	Vocab, SeqLen       int
	Eps                 float64 // rms_norm_eps
	Theta               float64 // rope_theta
	Scaling             *Llama3Scaling
	// Halves: RoPE pairs element i with i+HeadDim/2 (rotate_half, Hugging
	// Face's layout of q and k); otherwise 2i with 2i+1 (llama2.c, GGUF's
	// llama).
	Halves  bool
	QKVBias bool // q_proj, k_proj, v_proj have biases (Qwen2)
	QKNorm  bool // q_norm, k_norm over each head before RoPE (Qwen3)
	Tied    bool // lm_head is embed_tokens (tie_word_embeddings)
}

// HD is the head size.
func (c Config) HD() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	return c.Dim / c.Heads
}

// Layer is one block's weights, row-major [out, in] as Hugging Face's Linear
// stores them. Biases and norms the architecture lacks are nil.
type Layer struct {
	AttnNorm       []float32 // [Dim] input_layernorm
	WQ, WK, WV     []float32 // [Heads·HD, Dim], [KVHeads·HD, Dim] twice
	BQ, BK, BV     []float32 // q/k/v biases (QKVBias)
	QNorm, KNorm   []float32 // [HD] (QKNorm)
	WO             []float32 // [Dim, Heads·HD]
	FFNNorm        []float32 // [Dim] post_attention_layernorm
	Gate, Up, Down []float32 // [Hidden, Dim] twice, [Dim, Hidden]
}

// Weights are a whole model's.
type Weights struct {
	Embed  []float32 // [Vocab, Dim]
	Layers []Layer
	Norm   []float32 // [Dim]
	LMHead []float32 // [Vocab, Dim]; unused when Tied
}

// Reference runs a model over one sequence with a key/value cache.
type Reference struct {
	c      Config
	w      *Weights
	freqs  []float64   // per pair
	kc, vc [][]float64 // per layer, [SeqLen, KVHeads·HD]
}

// New checks the weights' sizes against c and returns a Reference with an
// empty cache.
func New(c Config, w *Weights) (*Reference, error) {
	hd := c.HD()
	if c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0 || hd <= 0 || hd%2 != 0 || c.Layers != len(w.Layers) {
		return nil, fmt.Errorf("reference: config %+v with %d layers", c, len(w.Layers))
	}
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	sizes := func(name string, v []float32, n int) error {
		if len(v) != n {
			return fmt.Errorf("reference: %s has %d values, want %d", name, len(v), n)
		}
		return nil
	}
	check := []struct {
		name string
		v    []float32
		n    int
	}{{"embed", w.Embed, c.Vocab * c.Dim}, {"norm", w.Norm, c.Dim}}
	if !c.Tied {
		check = append(check, struct {
			name string
			v    []float32
			n    int
		}{"lm_head", w.LMHead, c.Vocab * c.Dim})
	}
	for i, L := range w.Layers {
		p := fmt.Sprintf("layer %d ", i)
		check = append(check, []struct {
			name string
			v    []float32
			n    int
		}{{p + "attn_norm", L.AttnNorm, c.Dim}, {p + "wq", L.WQ, qd * c.Dim}, {p + "wk", L.WK, kvd * c.Dim},
			{p + "wv", L.WV, kvd * c.Dim}, {p + "wo", L.WO, c.Dim * qd}, {p + "ffn_norm", L.FFNNorm, c.Dim},
			{p + "gate", L.Gate, c.Hidden * c.Dim}, {p + "up", L.Up, c.Hidden * c.Dim}, {p + "down", L.Down, c.Dim * c.Hidden}}...)
		if c.QKVBias {
			check = append(check, []struct {
				name string
				v    []float32
				n    int
			}{{p + "bq", L.BQ, qd}, {p + "bk", L.BK, kvd}, {p + "bv", L.BV, kvd}}...)
		}
		if c.QKNorm {
			check = append(check, []struct {
				name string
				v    []float32
				n    int
			}{{p + "q_norm", L.QNorm, hd}, {p + "k_norm", L.KNorm, hd}}...)
		}
	}
	for _, x := range check {
		if err := sizes(x.name, x.v, x.n); err != nil {
			return nil, err
		}
	}
	r := &Reference{c: c, w: w, freqs: InvFreq(hd, c.Theta, c.Scaling)}
	for range c.Layers {
		r.kc = append(r.kc, make([]float64, c.SeqLen*kvd))
		r.vc = append(r.vc, make([]float64, c.SeqLen*kvd))
	}
	return r, nil
}

// InvFreq is RoPE's inverse frequency of each pair of a head of hd:
// θ^(-2i/hd) (_compute_default_rope_parameters), then, with Llama 3
// scaling, as _compute_llama3_parameters (Meta's apply_scaling) has it:
// wavelengths 2π/f shorter than original/high_freq_factor keep f, longer
// than original/low_freq_factor take f/factor, and those between blend the
// two with smooth = (original/wavelength − low) / (high − low):
// (1 − smooth)·f/factor + smooth·f.
func InvFreq(hd int, theta float64, s *Llama3Scaling) []float64 {
	f := make([]float64, hd/2)
	for i := range f {
		f[i] = 1 / math.Pow(theta, float64(2*i)/float64(hd))
	}
	if s == nil {
		return f
	}
	orig := float64(s.OriginalMaxPositions)
	lowWave, highWave := orig/s.LowFreqFactor, orig/s.HighFreqFactor
	for i, v := range f {
		wave := 2 * math.Pi / v
		switch {
		case wave < highWave:
		case wave > lowWave:
			f[i] = v / s.Factor
		default:
			smooth := (orig/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			f[i] = (1-smooth)*v/s.Factor + smooth*v
		}
	}
	return f
}

// Forward runs token at position pos (the positions before it already run)
// and returns the logits.
func (r *Reference) Forward(token, pos int) ([]float32, error) {
	c, w := r.c, r.w
	if token < 0 || token >= c.Vocab || pos < 0 || pos >= c.SeqLen {
		return nil, fmt.Errorf("reference: token %d at position %d of a %d-token vocabulary, %d positions", token, pos, c.Vocab, c.SeqLen)
	}
	hd := c.HD()
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	x := widen(w.Embed[token*c.Dim : (token+1)*c.Dim])
	for li, L := range w.Layers {
		h := rmsNorm(x, L.AttnNorm, c.Eps)
		q, k, v := linear(h, L.WQ, qd), linear(h, L.WK, kvd), linear(h, L.WV, kvd)
		if c.QKVBias {
			addBias(q, L.BQ)
			addBias(k, L.BK)
			addBias(v, L.BV)
		}
		if c.QKNorm {
			// Qwen3Attention: q_norm(q_proj(x).view(..., head_dim)), each
			// head on its own, before the rotation.
			for hh := 0; hh < c.Heads; hh++ {
				copy(q[hh*hd:(hh+1)*hd], rmsNorm(q[hh*hd:(hh+1)*hd], L.QNorm, c.Eps))
			}
			for hh := 0; hh < c.KVHeads; hh++ {
				copy(k[hh*hd:(hh+1)*hd], rmsNorm(k[hh*hd:(hh+1)*hd], L.KNorm, c.Eps))
			}
		}
		for hh := 0; hh < c.Heads; hh++ {
			r.rope(q[hh*hd:(hh+1)*hd], pos)
		}
		for hh := 0; hh < c.KVHeads; hh++ {
			r.rope(k[hh*hd:(hh+1)*hd], pos)
		}
		copy(r.kc[li][pos*kvd:], k)
		copy(r.vc[li][pos*kvd:], v)
		// eager_attention_forward: softmax(q·kᵀ·head_dim^-0.5) v, query head
		// h reading KV head h/(Heads/KVHeads) (repeat_kv).
		att := make([]float64, qd)
		group := c.Heads / c.KVHeads
		scale := 1 / math.Sqrt(float64(hd))
		for hh := 0; hh < c.Heads; hh++ {
			off := (hh / group) * hd
			qh := q[hh*hd : (hh+1)*hd]
			s := make([]float64, pos+1)
			m := math.Inf(-1)
			for p := range s {
				kp := r.kc[li][p*kvd+off : p*kvd+off+hd]
				var dot float64
				for i := range qh {
					dot += qh[i] * kp[i]
				}
				s[p] = dot * scale
				m = math.Max(m, s[p])
			}
			var sum float64
			for p := range s {
				s[p] = math.Exp(s[p] - m)
				sum += s[p]
			}
			o := att[hh*hd : (hh+1)*hd]
			for p := range s {
				vp := r.vc[li][p*kvd+off : p*kvd+off+hd]
				for i := range o {
					o[i] += s[p] / sum * vp[i]
				}
			}
		}
		for i, v := range linear(att, L.WO, c.Dim) {
			x[i] += v
		}
		// LlamaMLP: down(silu(gate(x)) · up(x)).
		h = rmsNorm(x, L.FFNNorm, c.Eps)
		g, u := linear(h, L.Gate, c.Hidden), linear(h, L.Up, c.Hidden)
		for i := range g {
			g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
		}
		for i, v := range linear(g, L.Down, c.Dim) {
			x[i] += v
		}
	}
	x = rmsNorm(x, w.Norm, c.Eps)
	head := w.LMHead
	if c.Tied {
		head = w.Embed
	}
	out := make([]float32, c.Vocab)
	for i, v := range linear(x, head, c.Vocab) {
		out[i] = float32(v)
	}
	return out, nil
}

// rope rotates one head at pos: apply_rotary_pos_emb's x·cos + rotate_half(x)·sin
// with cos and sin of cat(freqs, freqs)·pos (Halves), or the pairs (2i, 2i+1)
// by freqs[i]·pos.
func (r *Reference) rope(x []float64, pos int) {
	n := len(x) / 2
	if r.c.Halves {
		rot := make([]float64, len(x)) // rotate_half: cat(−x2, x1)
		for i := 0; i < n; i++ {
			rot[i], rot[i+n] = -x[i+n], x[i]
		}
		for j := range x {
			ang := float64(pos) * r.freqs[j%n]
			x[j] = x[j]*math.Cos(ang) + rot[j]*math.Sin(ang)
		}
		return
	}
	for i := 0; i < n; i++ {
		ang := float64(pos) * r.freqs[i]
		a, b := x[2*i], x[2*i+1]
		x[2*i] = a*math.Cos(ang) - b*math.Sin(ang)
		x[2*i+1] = a*math.Sin(ang) + b*math.Cos(ang)
	}
}

func widen(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// linear is x·Wᵀ for W [out, len(x)].
func linear(x []float64, w []float32, out int) []float64 {
	n := len(x)
	y := make([]float64, out)
	for o := range y {
		row := w[o*n : (o+1)*n]
		var s float64
		for i, v := range row {
			s += float64(v) * x[i]
		}
		y[o] = s
	}
	return y
}

func addBias(x []float64, b []float32) {
	for i := range x {
		x[i] += float64(b[i])
	}
}

// rmsNorm is LlamaRMSNorm: w · x / sqrt(mean(x²) + eps).
func rmsNorm(x []float64, w []float32, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(w[i]) * v * inv
	}
	return out
}

// Random is a model of shape c with seeded random weights: matrices of
// standard deviation 1/sqrt(fan-in), norm weights near 1, biases and the
// embedding of order one, so that every part of the maths moves the logits.
func Random(c Config, seed uint64) *Weights {
	r := rand.New(rand.NewPCG(seed, seed^0x5EED))
	vec := func(n int, mean, sd float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(mean + sd*r.NormFloat64())
		}
		return v
	}
	mat := func(out, in int) []float32 { return vec(out*in, 0, 1/math.Sqrt(float64(in))) }
	hd := c.HD()
	qd, kvd := c.Heads*hd, c.KVHeads*hd
	w := &Weights{Embed: vec(c.Vocab*c.Dim, 0, 1), Norm: vec(c.Dim, 1, 0.1)}
	if !c.Tied {
		w.LMHead = mat(c.Vocab, c.Dim)
	}
	for range c.Layers {
		L := Layer{AttnNorm: vec(c.Dim, 1, 0.1), WQ: mat(qd, c.Dim), WK: mat(kvd, c.Dim), WV: mat(kvd, c.Dim),
			WO: mat(c.Dim, qd), FFNNorm: vec(c.Dim, 1, 0.1), Gate: mat(c.Hidden, c.Dim), Up: mat(c.Hidden, c.Dim),
			Down: mat(c.Dim, c.Hidden)}
		if c.QKVBias {
			L.BQ, L.BK, L.BV = vec(qd, 0, 0.5), vec(kvd, 0, 0.5), vec(kvd, 0, 0.5)
		}
		if c.QKNorm {
			L.QNorm, L.KNorm = vec(hd, 1, 0.3), vec(hd, 1, 0.3)
		}
		w.Layers = append(w.Layers, L)
	}
	return w
}

// InterleaveRows reorders the rows of a [heads·hd, cols] tensor stored in
// Hugging Face's rotate-half order (pair i of a head is rows i and i+hd/2)
// into interleaved pairs (rows 2i and 2i+1): the inverse of the permute in
// transformers' convert_llama_weights_to_hf.py. It applies to q and k
// projections, their biases (cols 1) and the q/k norms' weights (heads 1,
// cols 1), which act on the same elements.
func InterleaveRows(w []float32, heads, hd, cols int) []float32 {
	out := make([]float32, len(w))
	for h := 0; h < heads; h++ {
		for i := 0; i < hd/2; i++ {
			for p := 0; p < 2; p++ {
				src := (h*hd + p*hd/2 + i) * cols
				dst := (h*hd + 2*i + p) * cols
				copy(out[dst:dst+cols], w[src:src+cols])
			}
		}
	}
	return out
}

// Interleaved is c with interleaved pairs and w with its q and k rows,
// biases and norm weights reordered accordingly (InterleaveRows): the same
// model for kernels that rotate pairs (2i, 2i+1). c must have Halves set.
func Interleaved(c Config, w *Weights) (Config, *Weights) {
	hd := c.HD()
	c.Halves = false
	out := *w
	out.Layers = nil
	for _, L := range w.Layers {
		L.WQ, L.WK = InterleaveRows(L.WQ, c.Heads, hd, c.Dim), InterleaveRows(L.WK, c.KVHeads, hd, c.Dim)
		if L.BQ != nil {
			L.BQ, L.BK = InterleaveRows(L.BQ, c.Heads, hd, 1), InterleaveRows(L.BK, c.KVHeads, hd, 1)
		}
		if L.QNorm != nil {
			L.QNorm, L.KNorm = InterleaveRows(L.QNorm, 1, hd, 1), InterleaveRows(L.KNorm, 1, hd, 1)
		}
		out.Layers = append(out.Layers, L)
	}
	return c, &out
}

// RelErr is the largest difference of got from want relative to want's
// largest magnitude: how a float32 forward's logits are held to the
// reference's.
func RelErr(got, want []float32) float64 {
	var m, d float64
	for i := range want {
		m = math.Max(m, math.Abs(float64(want[i])))
		d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
	}
	return d / m
}

// Argmax is the first index of the largest of v: the greedy token.
func Argmax(v []float32) int {
	b := 0
	for i, x := range v {
		if x > v[b] {
			b = i
		}
	}
	return b
}
