package llama

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/reprise-ml/reprise/internal/bounded"

	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/model/safetensors"
)

// Hugging Face architectures (config.json's "architectures") the loader
// reads, and the Config.Arch each becomes.
var hfArchs = map[string]string{
	"LlamaForCausalLM":   "llama",
	"MistralForCausalLM": "mistral",
	"Qwen2ForCausalLM":   "qwen2",
	"Qwen3ForCausalLM":   "qwen3",
}

// hfHarmless are config.json fields that do not change the forward's
// maths (training-only settings, bookkeeping, token ids read elsewhere).
var hfHarmless = map[string]bool{
	"_name_or_path": true, "transformers_version": true, "torch_dtype": true, "dtype": true, "use_cache": true,
	"initializer_range": true, "attention_dropout": true, "bos_token_id": true, "eos_token_id": true,
	"pad_token_id": true, "tokenizer_class": true, "model_type": true, "architectures": true,
	// pretraining_tp splits matrix products into slices: the same maths.
	"pretraining_tp": true,
	// Qwen2/Qwen3: which layers would slide, only with use_sliding_window.
	"max_window_layers": true,
}

// hfConfig is the maths-relevant part of config.json.
type hfConfig struct {
	HiddenSize            int             `json:"hidden_size"`
	IntermediateSize      int             `json:"intermediate_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	VocabSize             int             `json:"vocab_size"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	RMSNormEps            float64         `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	HiddenAct             *string         `json:"hidden_act"`
	AttentionBias         *bool           `json:"attention_bias"`
	MLPBias               *bool           `json:"mlp_bias"`
	SlidingWindow         *int            `json:"sliding_window"`
	UseSlidingWindow      *bool           `json:"use_sliding_window"`
	LayerTypes            []string        `json:"layer_types"`
}

// hfFields are the fields hfConfig reads.
var hfFields = map[string]bool{
	"hidden_size": true, "intermediate_size": true, "num_hidden_layers": true, "num_attention_heads": true,
	"num_key_value_heads": true, "head_dim": true, "vocab_size": true, "max_position_embeddings": true,
	"rms_norm_eps": true, "rope_theta": true, "rope_scaling": true, "tie_word_embeddings": true, "hidden_act": true,
	"attention_bias": true, "mlp_bias": true, "sliding_window": true, "use_sliding_window": true, "layer_types": true,
}

// readJSONObject reads a JSON object file of at most limit bytes, refusing
// duplicate keys (encoding/json would keep the last silently).
func readJSONObject(path string, limit int64) (map[string]json.RawMessage, error) {
	raw, err := bounded.ReadFile(path, limit)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("llama: %s: not a JSON object", path)
	}
	obj := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("llama: %s: bad JSON: %w", path, err)
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("llama: %s: field %q: bad JSON: %w", path, k, err)
		}
		if _, dup := obj[k]; dup {
			return nil, fmt.Errorf("llama: %s: field %q appears twice", path, k)
		}
		obj[k] = v
	}
	// The closing brace, then nothing: a truncated file or one with
	// trailing bytes is not a config.
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, fmt.Errorf("llama: %s: truncated JSON: the object does not end", path)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("llama: %s: bytes after the JSON object", path)
	}
	return obj, nil
}

// HFConfig reads a Config from a Hugging Face config.json: every field is
// either read, known to leave the maths alone, or an error naming it.
func HFConfig(path string) (Config, error) {
	obj, err := readJSONObject(path, 1<<20)
	if err != nil {
		return Config{}, err
	}
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("llama: %s: %s: %s", path, field, fmt.Sprintf(format, args...))
	}
	unimpl := func(field, why string) error {
		return fmt.Errorf("llama: %s: field %q: %w: %s", path, field, ErrNotImplemented, why)
	}
	var archs []string
	if err := json.Unmarshal(obj["architectures"], &archs); err != nil || len(archs) != 1 {
		return Config{}, bad("architectures", "want a list of one architecture, have %s", obj["architectures"])
	}
	arch, ok := hfArchs[archs[0]]
	if !ok {
		known := slices.Sorted(maps.Keys(hfArchs))
		return Config{}, bad("architectures", "%q is not supported (%s are)", archs[0], strings.Join(known, ", "))
	}
	keys := slices.Sorted(maps.Keys(obj))
	for _, k := range keys {
		if !hfFields[k] && !hfHarmless[k] {
			return Config{}, unimpl(k, "not understood; it may change the maths, so the model is refused rather than the field ignored")
		}
	}
	var h hfConfig
	for _, k := range keys {
		if !hfFields[k] {
			continue
		}
		one, _ := json.Marshal(map[string]json.RawMessage{k: obj[k]})
		if err := json.Unmarshal(one, &h); err != nil {
			return Config{}, bad(k, "%s: %v", obj[k], err)
		}
	}
	c := Config{Arch: arch, Dim: h.HiddenSize, Hidden: h.IntermediateSize, Layers: h.NumHiddenLayers, Heads: h.NumAttentionHeads,
		Vocab: h.VocabSize, SeqLen: h.MaxPositionEmbeddings, NormEps: h.RMSNormEps, RopeTheta: 10000}
	c.TrainedSeqLen = c.SeqLen
	c.KVHeads = c.Heads
	if h.NumKeyValueHeads != nil {
		c.KVHeads = *h.NumKeyValueHeads
	}
	if c.Heads > 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	if h.HeadDim != nil {
		c.HeadDim = *h.HeadDim
	}
	if h.RopeTheta != nil {
		c.RopeTheta = *h.RopeTheta
	}
	if h.TieWordEmbeddings != nil {
		c.TiedEmbeddings = *h.TieWordEmbeddings
	}
	if h.HiddenAct != nil && *h.HiddenAct != "silu" {
		return Config{}, unimpl("hidden_act", fmt.Sprintf("%q (silu is)", *h.HiddenAct))
	}
	if h.MLPBias != nil && *h.MLPBias {
		return Config{}, unimpl("mlp_bias", "biases in the MLP")
	}
	switch arch {
	case "qwen2":
		// Qwen2 always has q/k/v biases (and none on o).
		c.QKVBias = true
	case "qwen3":
		c.QKNorm = true
	}
	if h.AttentionBias != nil && *h.AttentionBias {
		if arch != "qwen3" {
			// Llama's attention_bias also puts a bias on o_proj.
			return Config{}, unimpl("attention_bias", "biases on q, k, v and o")
		}
		return Config{}, unimpl("attention_bias", "qwen3 with q/k/v/o biases")
	}
	for i, lt := range h.LayerTypes {
		if lt != "full_attention" {
			return Config{}, unimpl(fmt.Sprintf("layer_types[%d]", i), fmt.Sprintf("%q layers", lt))
		}
	}
	switch arch {
	case "mistral":
		if h.SlidingWindow != nil {
			c.SlidingWindow = *h.SlidingWindow
		}
	case "qwen2", "qwen3":
		if h.UseSlidingWindow != nil && *h.UseSlidingWindow && h.SlidingWindow != nil {
			c.SlidingWindow = *h.SlidingWindow
		}
	default:
		if h.SlidingWindow != nil {
			return Config{}, unimpl("sliding_window", arch+" with a sliding window")
		}
	}
	if len(h.RopeScaling) > 0 && string(h.RopeScaling) != "null" {
		var rs struct {
			Type, RopeType                        string
			Factor, LowFreqFactor, HighFreqFactor float64
			OriginalMaxPositionEmbeddings         int
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(h.RopeScaling, &m); err != nil {
			return Config{}, bad("rope_scaling", "want an object: %v", err)
		}
		for k, v := range m {
			var err error
			switch k {
			case "type":
				err = json.Unmarshal(v, &rs.Type)
			case "rope_type":
				err = json.Unmarshal(v, &rs.RopeType)
			case "factor":
				err = json.Unmarshal(v, &rs.Factor)
			case "low_freq_factor":
				err = json.Unmarshal(v, &rs.LowFreqFactor)
			case "high_freq_factor":
				err = json.Unmarshal(v, &rs.HighFreqFactor)
			case "original_max_position_embeddings":
				err = json.Unmarshal(v, &rs.OriginalMaxPositionEmbeddings)
			default:
				return Config{}, unimpl("rope_scaling."+k, "not understood")
			}
			if err != nil {
				return Config{}, bad("rope_scaling."+k, "%s: %v", v, err)
			}
		}
		typ := cmpOr(rs.RopeType, rs.Type)
		switch typ {
		case "default", "":
		case "llama3":
			if rs.Factor <= 0 || rs.LowFreqFactor <= 0 || rs.HighFreqFactor <= rs.LowFreqFactor || rs.OriginalMaxPositionEmbeddings <= 0 {
				return Config{}, bad("rope_scaling", "llama3 needs factor, low_freq_factor < high_freq_factor and original_max_position_embeddings, have %s", h.RopeScaling)
			}
			c.RopeScaling = &RopeScaling{Type: typ, Factor: rs.Factor, LowFreqFactor: rs.LowFreqFactor,
				HighFreqFactor: rs.HighFreqFactor, OriginalContext: rs.OriginalMaxPositionEmbeddings}
		default:
			return Config{}, unimpl("rope_scaling.type", fmt.Sprintf("%q (llama3 is)", typ))
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%w (file %s)", err, path)
	}
	return c, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// HFWeights serves a Hugging Face directory's safetensors.
type HFWeights struct {
	dir  string
	cfg  Config
	st   *safetensors.Model
	stop []int32
	used map[string]bool
}

// hfName is a role's tensor name in Hugging Face's Llama layout.
func hfName(role string, layer int) string {
	switch role {
	case RoleEmbedding:
		return "model.embed_tokens.weight"
	case RoleOutputNorm:
		return "model.norm.weight"
	case RoleOutput:
		return "lm_head.weight"
	}
	p := fmt.Sprintf("model.layers.%d.", layer)
	switch role {
	case RoleAttnNorm:
		return p + "input_layernorm.weight"
	case RoleFFNNorm:
		return p + "post_attention_layernorm.weight"
	case RoleQ, RoleK, RoleV, RoleO:
		return p + "self_attn." + role[len("attn_"):len("attn_")+1] + "_proj.weight"
	case RoleQBias, RoleKBias, RoleVBias:
		return p + "self_attn." + role[len("attn_"):len("attn_")+1] + "_proj.bias"
	case RoleQNorm:
		return p + "self_attn.q_norm.weight"
	case RoleKNorm:
		return p + "self_attn.k_norm.weight"
	case RoleGate:
		return p + "mlp.gate_proj.weight"
	case RoleUp:
		return p + "mlp.up_proj.weight"
	case RoleDown:
		return p + "mlp.down_proj.weight"
	}
	return ""
}

// OpenHF opens a Hugging Face model directory: config.json, the
// safetensors (one file or shards), generation_config.json's stop tokens.
func OpenHF(dir string) (*HFWeights, error) {
	cfg, err := HFConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	h := &HFWeights{dir: dir, cfg: cfg, st: st, used: map[string]bool{}}
	if _, ok := h.tensor("lm_head.weight"); ok && cfg.TiedEmbeddings {
		// Some checkpoints store the tied matrix twice; it must then be the
		// same bytes, or the config is wrong.
		a, _, _ := st.Tensor("lm_head.weight")
		b, fb, ok := st.Tensor("model.embed_tokens.weight")
		fa, _ := h.tensor("lm_head.weight")
		if !ok || !bytes.Equal(fa, fb.Data(b)) || a.DType != b.DType {
			st.Close()
			return nil, fmt.Errorf("llama: %s: tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight", dir)
		}
		h.used["lm_head.weight"] = true
	}
	for _, name := range []string{"config.json", "generation_config.json"} {
		obj, err := readJSONObject(filepath.Join(dir, name), 1<<20)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			st.Close()
			return nil, err
		}
		for _, k := range []string{"eos_token_id", "bos_token_id"} {
			ids, err := tokenIDs(obj[k])
			if err != nil {
				st.Close()
				return nil, fmt.Errorf("llama: %s/%s: %s: %w", dir, name, k, err)
			}
			for _, id := range ids {
				if !slices.Contains(h.stop, id) {
					h.stop = append(h.stop, id)
				}
			}
		}
	}
	return h, nil
}

// tokenIDs reads a token id or a list of them (absent or null: none).
func tokenIDs(raw json.RawMessage) ([]int32, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int32
	if json.Unmarshal(raw, &one) == nil {
		return []int32{one}, nil
	}
	var many []int32
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("want a token id or a list of them, have %s", raw)
	}
	return many, nil
}

func (h *HFWeights) tensor(name string) ([]byte, bool) {
	t, f, ok := h.st.Tensor(name)
	if !ok {
		return nil, false
	}
	return f.Data(t), true
}

// StopTokens are config.json's and generation_config.json's eos (and bos:
// see ggufStopTokens) token ids.
func (h *HFWeights) StopTokens() []int32 { return h.stop }

// Config is the model's shape and maths, from config.json.
func (h *HFWeights) Config() Config { return h.cfg }

// Path is the model's directory.
func (h *HFWeights) Path() string { return h.dir }

// Close closes every safetensors shard.
func (h *HFWeights) Close() error { return h.st.Close() }

// Done lets an uploaded weight's pages leave resident memory.
func (h *HFWeights) Done(w Weight) {
	if t, f, ok := h.st.Tensor(w.Name); ok {
		f.Drop(t)
	}
}

// Retain implements Retainer.
func (h *HFWeights) Retain(w Weight) (func(), bool) {
	_, f, ok := h.st.Tensor(w.Name)
	if !ok {
		return nil, false
	}
	return f.Retain(w.Data)
}

// Unused lists the directory's tensors no role has asked for (after a
// load): a tensor the loader does not know could be maths it would skip.
func (h *HFWeights) Unused() []string {
	var u []string
	for _, n := range h.st.Names() {
		if !h.used[n] && !strings.HasSuffix(n, "rotary_emb.inv_freq") {
			u = append(u, n)
		}
	}
	return u
}

// Weight is a role's tensor (layer -1 for a global one) in the layout the
// loader takes (see Weights); ok is false when the directory has none.
func (h *HFWeights) Weight(role string, layer int) (Weight, bool, error) {
	name := hfName(role, layer)
	t, f, ok := h.st.Tensor(name)
	if !ok {
		return Weight{}, false, nil
	}
	h.used[name] = true
	w := Weight{Name: name, File: f.Path, Data: f.Data(t)}
	switch t.DType {
	case safetensors.F32:
		w.Type = gguf.F32
	case safetensors.F16:
		w.Type = gguf.F16
	case safetensors.BF16:
		w.Type = gguf.BF16
	default:
		return Weight{}, false, fmt.Errorf("llama: %s: dtype %s: %w (F32, F16 and BF16 are)", where(w), t.DType, ErrNotImplemented)
	}
	if err := w.setShape(t.Shape, true); err != nil {
		return Weight{}, false, err
	}
	// Hugging Face keeps every architecture's q and k in rotate-half order.
	w.RotateHalf = rotary(role)
	return w, true, nil
}
