package llama

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/reprise-ml/reprise/model/gguf"
)

// ggufWeights serves a GGUF file's tensors.
type ggufWeights struct {
	f      *gguf.File
	used   map[string]bool
	cfg    Config
	rotate bool // q/k rows are rotate-half (qwen2, qwen3: ggml's NEOX RoPE)
}

// GGUF architectures the loader reads (Mistral's GGUF files say "llama").
var ggufArchs = map[string]bool{"llama": true, "qwen2": true, "qwen3": true}

// ggufKnown are the per-architecture metadata keys (after "ARCH.") the
// loader reads or knows to be harmless; any other key of the architecture
// could change the maths and is refused, naming it.
var ggufKnown = map[string]bool{
	"context_length": true, "embedding_length": true, "feed_forward_length": true, "block_count": true,
	"attention.head_count": true, "attention.head_count_kv": true, "attention.key_length": true,
	"attention.value_length": true, "attention.layer_norm_rms_epsilon": true, "rope.dimension_count": true,
	"rope.freq_base": true, "vocab_size": true, "rope.scaling.type": true, "rope.scaling.factor": true,
	"rope.scaling.original_context_length": true, "rope.scaling.finetuned": true,
	// Pooling and causality keys only matter for embedding models.
	"pooling_type": true,
}

// ggufFail is an error about a GGUF file's field.
func ggufFail(f *gguf.File, field, format string, args ...any) error {
	return fmt.Errorf("llama: %s: %s: %s", f.Path, field, fmt.Sprintf(format, args...))
}

// GGUFConfig reads a Config from a GGUF file's metadata (and its
// rope_freqs tensor, if any).
func GGUFConfig(f *gguf.File) (Config, error) {
	arch, err := f.Architecture()
	if err != nil {
		return Config{}, fmt.Errorf("llama: %w", err)
	}
	if !ggufArchs[arch] {
		return Config{}, ggufFail(f, "general.architecture", "architecture %q is not supported (llama, qwen2 and qwen3 are)", arch)
	}
	for _, k := range f.KeysWithPrefix(arch + ".") {
		if !ggufKnown[strings.TrimPrefix(k, arch+".")] {
			return Config{}, fmt.Errorf("llama: %s: metadata %q: %w: the key may change the maths, so the file is refused rather than the key ignored", f.Path, k, ErrNotImplemented)
		}
	}
	geti := func(key string, def int64) (int, error) {
		n, err := f.Int(arch + "." + key)
		if errors.Is(err, gguf.ErrNotFound) && def >= 0 {
			return int(def), nil
		}
		if err != nil {
			return 0, fmt.Errorf("llama: %w", err)
		}
		if n <= 0 || n > 1<<24 {
			return 0, ggufFail(f, arch+"."+key, "%d is out of range", n)
		}
		return int(n), nil
	}
	c := Config{Arch: arch}
	for _, x := range []struct {
		dst *int
		key string
		def int64
	}{
		{&c.SeqLen, "context_length", -1}, {&c.Dim, "embedding_length", -1}, {&c.Hidden, "feed_forward_length", -1},
		{&c.Layers, "block_count", -1}, {&c.Heads, "attention.head_count", -1},
	} {
		if *x.dst, err = geti(x.key, x.def); err != nil {
			return Config{}, err
		}
	}
	if v, ok := f.Lookup(arch + ".attention.head_count_kv"); ok && v.Type() == gguf.TypeArray {
		return Config{}, fmt.Errorf("llama: %s: %s.attention.head_count_kv: %w: a different head count per layer", f.Path, arch, ErrNotImplemented)
	}
	if c.KVHeads, err = geti("attention.head_count_kv", int64(c.Heads)); err != nil {
		return Config{}, err
	}
	if c.HeadDim, err = geti("attention.key_length", int64(c.Dim/max(1, c.Heads))); err != nil {
		return Config{}, err
	}
	if vl, err := geti("attention.value_length", int64(c.HeadDim)); err != nil {
		return Config{}, err
	} else if vl != c.HeadDim {
		return Config{}, fmt.Errorf("llama: %s: %s.attention.value_length=%d: %w: values of another width than keys (%d)", f.Path, arch, vl, ErrNotImplemented, c.HeadDim)
	}
	if rd, err := geti("rope.dimension_count", int64(c.HeadDim)); err != nil {
		return Config{}, err
	} else if rd != c.HeadDim {
		return Config{}, fmt.Errorf("llama: %s: %s.rope.dimension_count=%d: %w: partial rotary embeddings (head_dim %d)", f.Path, arch, rd, ErrNotImplemented, c.HeadDim)
	}
	c.TrainedSeqLen = c.SeqLen
	c.RopeTheta = 10000
	if t, err := f.Float(arch + ".rope.freq_base"); err == nil {
		c.RopeTheta = t
	} else if !errors.Is(err, gguf.ErrNotFound) {
		return Config{}, fmt.Errorf("llama: %w", err)
	}
	eps, err := f.Float(arch + ".attention.layer_norm_rms_epsilon")
	if err != nil {
		return Config{}, fmt.Errorf("llama: %w", err)
	}
	c.NormEps = eps
	if st, err := f.String(arch + ".rope.scaling.type"); err == nil && st != "none" {
		c.RopeScaling = &RopeScaling{Type: st}
		if fa, err := f.Float(arch + ".rope.scaling.factor"); err == nil {
			c.RopeScaling.Factor = fa
		}
	} else if err != nil && !errors.Is(err, gguf.ErrNotFound) {
		return Config{}, fmt.Errorf("llama: %w", err)
	}
	if t, ok := f.Tensor("rope_freqs.weight"); ok {
		// Llama 3.1's rope scaling, as llama.cpp's converter bakes it:
		// one divisor per pair.
		if t.Type != gguf.F32 || len(t.Shape) != 1 {
			return Config{}, ggufFail(f, "tensor \"rope_freqs.weight\"", "%v %v, want F32 [head_dim/2]", t.Type, t.Shape)
		}
		ff := make([]float32, t.Shape[0])
		if err := decodeRow(gguf.F32, f.Data(t), ff); err != nil {
			return Config{}, err
		}
		for i, v := range ff {
			// Each pair's frequency is divided by its factor: zero, a
			// negative or a non-finite factor would give Inf or NaN angles.
			if !(v > 0) || math.IsInf(float64(v), 0) {
				return Config{}, ggufFail(f, "tensor \"rope_freqs.weight\"", "factor %d is %v, want a finite positive number", i, v)
			}
		}
		if c.RopeScaling != nil && c.RopeScaling.Type != "llama3" && c.RopeScaling.Factor != 0 && c.RopeScaling.Factor != 1 {
			// Another scaling on top of the baked factors would be dropped.
			return Config{}, ggufFail(f, arch+".rope.scaling.type", "%q beside rope_freqs.weight (which is Llama 3's scaling)", c.RopeScaling.Type)
		}
		if c.RopeScaling == nil {
			c.RopeScaling = &RopeScaling{Type: "llama3"}
		}
		c.RopeScaling.FreqFactors = ff
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok {
		return Config{}, ggufFail(f, "tensor \"token_embd.weight\"", "missing")
	}
	if len(emb.Shape) != 2 {
		return Config{}, ggufFail(f, "tensor \"token_embd.weight\"", "shape %v, want [dim, vocab]", emb.Shape)
	}
	c.Vocab = int(min(emb.Shape[1], 1<<30))
	if v, err := geti("vocab_size", int64(c.Vocab)); err != nil {
		return Config{}, err
	} else if v != c.Vocab {
		return Config{}, ggufFail(f, arch+".vocab_size", "%d, while token_embd.weight has %d rows", v, c.Vocab)
	}
	_, hasOut := f.Tensor("output.weight")
	c.TiedEmbeddings = !hasOut
	switch arch {
	case "qwen2":
		c.QKVBias = true
	case "qwen3":
		c.QKNorm = true
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%w (file %s)", err, f.Path)
	}
	return c, nil
}

// GGUFWeights is the Weights of an open GGUF file; Close closes the file.
func GGUFWeights(f *gguf.File) (Weights, error) {
	cfg, err := GGUFConfig(f)
	if err != nil {
		return nil, err
	}
	return &ggufWeights{f: f, cfg: cfg, rotate: cfg.Arch != "llama", used: map[string]bool{"rope_freqs.weight": true}}, nil
}

func (g *ggufWeights) Config() Config { return g.cfg }
func (g *ggufWeights) Path() string   { return g.f.Path }
func (g *ggufWeights) Close() error   { return g.f.Close() }

func (g *ggufWeights) Done(w Weight) {
	if t, ok := g.f.Tensor(w.Name); ok {
		g.f.Drop(t)
	}
}

// Retain implements Retainer.
func (g *ggufWeights) Retain(w Weight) (func(), bool) { return g.f.Retain(w.Data) }

// Unused lists the file's tensors no role asked for (see HFWeights.Unused).
func (g *ggufWeights) Unused() []string {
	var u []string
	for _, t := range g.f.Tensors {
		if !g.used[t.Name] {
			u = append(u, t.Name)
		}
	}
	return u
}

// ggufName is a role's tensor name.
func ggufName(role string, layer int) string {
	name := role
	if layer >= 0 {
		name = fmt.Sprintf("blk.%d.%s", layer, role)
	}
	if !strings.HasSuffix(name, ".bias") {
		name += ".weight"
	}
	return name
}

func (g *ggufWeights) Weight(role string, layer int) (Weight, bool, error) {
	name := ggufName(role, layer)
	t, data, err := g.f.TensorData(name)
	if errors.Is(err, gguf.ErrNotFound) {
		return Weight{}, false, nil
	}
	if err != nil {
		return Weight{}, false, err
	}
	g.used[name] = true
	w := Weight{Name: name, File: g.f.Path, Type: t.Type, Data: data}
	if err := w.setShape(t.Shape, false); err != nil {
		return Weight{}, false, err
	}
	w.RotateHalf = g.rotate && rotary(role)
	return w, true, nil
}

// ggufStopTokens are the tokens that end a generation: end of sequence,
// of turn and of message (llama.cpp's end-of-generation set) and the
// beginning of sequence: a generated BOS starts a new document, so this one
// has ended (llama2.c's rule, which stories260K relies on: its stories end
// with BOS).
func ggufStopTokens(f *gguf.File) []int32 {
	var stop []int32
	for _, k := range []string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id", "tokenizer.ggml.bos_token_id"} {
		if n, err := f.Int(k); err == nil && n >= 0 && n < 1<<31 && !slices.Contains(stop, int32(n)) {
			stop = append(stop, int32(n))
		}
	}
	return stop
}
