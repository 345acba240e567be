package llama

import (
	"errors"
	"fmt"
	"math"

	"github.com/reprise-ml/reprise/model/llama2c"
)

// Config describes a Llama-family decoder independently of the file it came
// from: llama2.c checkpoints, GGUF files and Hugging Face directories all
// reduce to one. Fields that change the maths beyond Llama 2 (rope scaling,
// biases, q/k norms) are declared here from the start; a model whose Config
// needs one the forward does not implement yet is refused by Check with
// ErrNotImplemented naming the field, never served with it ignored.
type Config struct {
	// Arch names the architecture the file declared ("llama", "mistral",
	// "qwen2", "qwen3"), for messages and inspect.
	Arch string `json:"arch"`
	// Dim is the residual width, Hidden the feed-forward width.
	Dim    int `json:"dim"`
	Hidden int `json:"hidden"`
	Layers int `json:"layers"`
	// Heads query heads and KVHeads key/value heads (grouped-query
	// attention) of HeadDim each; HeadDim may differ from Dim/Heads.
	Heads   int `json:"heads"`
	KVHeads int `json:"kv_heads"`
	HeadDim int `json:"head_dim"`
	Vocab   int `json:"vocab"`
	// SeqLen is the context length served: positions 0..SeqLen-1.
	SeqLen int `json:"seq_len"`
	// TrainedSeqLen is the context length the file declares (SeqLen may be
	// raised above it on request).
	TrainedSeqLen int `json:"trained_seq_len"`
	// RopeTheta is the RoPE base (10000 for Llama 2).
	RopeTheta float64 `json:"rope_theta"`
	// RopeScaling, when set, rescales the RoPE frequencies (Llama 3.1).
	RopeScaling *RopeScaling `json:"rope_scaling,omitempty"`
	// NormEps is RMSNorm's epsilon.
	NormEps float64 `json:"norm_eps"`
	// TiedEmbeddings: the classifier is the token embedding matrix.
	TiedEmbeddings bool `json:"tied_embeddings"`
	// QKVBias: q, k and v projections add a bias (Qwen2).
	QKVBias bool `json:"qkv_bias"`
	// QKNorm: q and k are RMS-normalised per head before RoPE, with weights
	// of HeadDim (Qwen3).
	QKNorm bool `json:"qk_norm"`
	// SlidingWindow, when positive, limits attention to that many most
	// recent positions (Mistral v0.1). It is honoured by capping SeqLen at
	// it (the attention is then the full one).
	SlidingWindow int `json:"sliding_window,omitempty"`
}

// RopeScaling is a rescaling of the RoPE frequencies.
type RopeScaling struct {
	// Type is "llama3" (Hugging Face's rope_type; GGUF files carry the
	// resulting per-pair factors in FreqFactors instead).
	Type string
	// Factor, LowFreqFactor, HighFreqFactor and OriginalContext are the
	// llama3 parameters (transformers' _compute_llama3_parameters).
	Factor, LowFreqFactor, HighFreqFactor float64
	OriginalContext                       int
	// FreqFactors, when set, divide each pair's frequency (GGUF's
	// rope_freqs.weight, HeadDim/2 values).
	FreqFactors []float32
}

// ErrNotImplemented is wrapped by errors for a Config or file field the
// forward does not implement (yet); the message names the field.
var ErrNotImplemented = errors.New("not implemented")

// notImplemented names a field the forward cannot honour.
func notImplemented(field, why string) error {
	return fmt.Errorf("llama: %w yet: %s (%s)", ErrNotImplemented, field, why)
}

// QDim is the width of the queries, Heads*HeadDim.
func (c Config) QDim() int { return c.Heads * c.HeadDim }

// KVDim is the width of the keys and of the values, KVHeads*HeadDim.
func (c Config) KVDim() int { return c.KVHeads * c.HeadDim }

// HeadSize is HeadDim.
func (c Config) HeadSize() int { return c.HeadDim }

func (c Config) String() string {
	return fmt.Sprintf("%s dim=%d hidden=%d layers=%d heads=%d kv_heads=%d head_dim=%d vocab=%d seq_len=%d",
		c.Arch, c.Dim, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.Vocab, c.SeqLen)
}

// Validate checks the shape: every size positive and at most 1<<20 (heads
// and layers at most 1<<12), Heads a multiple of KVHeads, an even HeadDim,
// a positive epsilon and theta.
func (c Config) Validate() error {
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"dim", c.Dim, 1 << 20}, {"hidden", c.Hidden, 1 << 20}, {"layers", c.Layers, 1 << 12},
		{"heads", c.Heads, 1 << 12}, {"kv_heads", c.KVHeads, 1 << 12}, {"head_dim", c.HeadDim, 1 << 16},
		{"vocab", c.Vocab, 1 << 24}, {"seq_len", c.SeqLen, 1 << 24},
	} {
		if f.v <= 0 || f.v > f.max {
			return fmt.Errorf("llama: invalid config (%v): %s=%d must be in 1..%d", c, f.name, f.v, f.max)
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("llama: invalid config (%v): heads=%d is not a multiple of kv_heads=%d", c, c.Heads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("llama: invalid config (%v): head_dim=%d is odd; RoPE rotates pairs", c, c.HeadDim)
	}
	if !(c.NormEps > 0 && c.NormEps < 1) {
		return fmt.Errorf("llama: invalid config (%v): rms_norm_eps=%v must be in (0, 1)", c, c.NormEps)
	}
	if !(c.RopeTheta > 1) || math.IsInf(c.RopeTheta, 0) {
		return fmt.Errorf("llama: invalid config (%v): rope_theta=%v must be above 1", c, c.RopeTheta)
	}
	if c.SlidingWindow < 0 {
		return fmt.Errorf("llama: invalid config (%v): sliding_window=%d is negative", c, c.SlidingWindow)
	}
	if r := c.RopeScaling; r != nil && r.FreqFactors != nil && len(r.FreqFactors) != c.HeadDim/2 {
		return fmt.Errorf("llama: invalid config (%v): %d rope frequency factors, want head_dim/2=%d", c, len(r.FreqFactors), c.HeadDim/2)
	}
	return nil
}

// Check is Validate plus what the forward implements: it returns an error
// wrapping ErrNotImplemented naming the first field the forward cannot
// honour yet. (Rope scaling of type llama3 or by per-pair factors, q/k/v
// biases and q/k norms it implements.)
func (c Config) Check() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if r := c.RopeScaling; r != nil && r.FreqFactors == nil && r.Type != "llama3" {
		return notImplemented("rope_scaling", "type "+r.Type+": llama3 is implemented")
	}
	return nil
}

// Params counts the parameters (a tied classifier once).
func (c Config) Params() int64 {
	d, h, q, kv := int64(c.Dim), int64(c.Hidden), int64(c.QDim()), int64(c.KVDim())
	per := 2*d*q + 2*kv*d + 3*d*h + 2*d
	if c.QKVBias {
		per += q + 2*kv
	}
	if c.QKNorm {
		per += 2 * int64(c.HeadDim)
	}
	p := int64(c.Layers)*per + int64(c.Vocab)*d + d
	if !c.TiedEmbeddings {
		p += int64(c.Vocab) * d
	}
	return p
}

// FromLlama2c is the Config of a llama2.c checkpoint: Llama 2's constants
// (theta 10000, epsilon 1e-5) and HeadDim = Dim/Heads.
func FromLlama2c(c llama2c.Config) Config {
	return Config{Arch: "llama", Dim: c.Dim, Hidden: c.Hidden, Layers: c.Layers, Heads: c.Heads, KVHeads: c.KVHeads,
		HeadDim: c.HeadSize(), Vocab: c.Vocab, SeqLen: c.SeqLen, TrainedSeqLen: c.SeqLen, RopeTheta: 10000, NormEps: 1e-5,
		TiedEmbeddings: c.SharedClassifier}
}
