package reference

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/reprise-ml/reprise/model/safetensors"
)

// WriteHF writes the model as a Hugging Face directory, for tests of
// loaders and forwards against the reference: config.json (architectures
// [arch], c's fields under transformers' names, BOS 1 and EOS 2, plus
// extra) and model.safetensors in float32 under transformers' tensor
// names. The weights are written as they are: with c.Halves they are in
// Hugging Face's own rotate-half order.
func WriteHF(dir, arch string, c Config, w *Weights, extra map[string]any) error {
	conf := map[string]any{
		"architectures": []string{arch}, "hidden_size": c.Dim, "intermediate_size": c.Hidden, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "head_dim": c.HD(), "vocab_size": c.Vocab,
		"max_position_embeddings": c.SeqLen, "rms_norm_eps": c.Eps, "rope_theta": c.Theta, "tie_word_embeddings": c.Tied,
		"hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
	}
	if s := c.Scaling; s != nil {
		conf["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": s.Factor, "low_freq_factor": s.LowFreqFactor,
			"high_freq_factor": s.HighFreqFactor, "original_max_position_embeddings": s.OriginalMaxPositions}
	}
	for k, v := range extra {
		conf[k] = v
	}
	js, err := json.Marshal(conf)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		return err
	}
	hd := c.HD()
	qd, kvd := int64(c.Heads*hd), int64(c.KVHeads*hd)
	var ts []safetensors.WriteTensor
	add := func(name string, v []float32, shape ...int64) {
		if v == nil {
			return
		}
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		ts = append(ts, safetensors.WriteTensor{Name: name, DType: safetensors.F32, Shape: shape, Data: b})
	}
	d, h, v := int64(c.Dim), int64(c.Hidden), int64(c.Vocab)
	add("model.embed_tokens.weight", w.Embed, v, d)
	for i, L := range w.Layers {
		p := "model.layers." + strconv.Itoa(i) + "."
		add(p+"input_layernorm.weight", L.AttnNorm, d)
		add(p+"self_attn.q_proj.weight", L.WQ, qd, d)
		add(p+"self_attn.k_proj.weight", L.WK, kvd, d)
		add(p+"self_attn.v_proj.weight", L.WV, kvd, d)
		add(p+"self_attn.q_proj.bias", L.BQ, qd)
		add(p+"self_attn.k_proj.bias", L.BK, kvd)
		add(p+"self_attn.v_proj.bias", L.BV, kvd)
		add(p+"self_attn.q_norm.weight", L.QNorm, int64(hd))
		add(p+"self_attn.k_norm.weight", L.KNorm, int64(hd))
		add(p+"self_attn.o_proj.weight", L.WO, d, qd)
		add(p+"post_attention_layernorm.weight", L.FFNNorm, d)
		add(p+"mlp.gate_proj.weight", L.Gate, h, d)
		add(p+"mlp.up_proj.weight", L.Up, h, d)
		add(p+"mlp.down_proj.weight", L.Down, d, h)
	}
	add("model.norm.weight", w.Norm, d)
	if !c.Tied {
		add("lm_head.weight", w.LMHead, v, d)
	}
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, ts, nil); err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, safetensors.SingleName), buf.Bytes(), 0o644)
}

// Greedy runs each prompt through a fresh Reference: its last logits, and
// its greedy continuation of up to steps tokens, ending before a token of
// stop.
func Greedy(c Config, w *Weights, prompts [][]int32, steps int, stop ...int32) (logits [][]float32, gens [][]int32, err error) {
	for _, p := range prompts {
		ref, err := New(c, w)
		if err != nil {
			return nil, nil, err
		}
		var lg []float32
		for pos, tok := range p {
			if lg, err = ref.Forward(int(tok), pos); err != nil {
				return nil, nil, err
			}
		}
		logits = append(logits, lg)
		var gen []int32
		for pos := len(p); len(gen) < steps; pos++ {
			next := int32(Argmax(lg))
			if contains(stop, next) {
				break
			}
			gen = append(gen, next)
			if lg, err = ref.Forward(int(next), pos); err != nil {
				return nil, nil, err
			}
		}
		gens = append(gens, gen)
	}
	return logits, gens, nil
}

func contains(s []int32, x int32) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
