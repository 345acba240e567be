package llama

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/model/safetensors"
	"github.com/reprise-ml/reprise/tokenizer"
)

// WriteHF writes a model as a Hugging Face directory in LlamaForCausalLM's
// layout: config.json, and the weights as safetensors of dtype (F32 or
// BF16), in shards files (1: model.safetensors; more: numbered shards and
// model.safetensors.index.json), q and k rows permuted into Hugging Face's
// rotate-half order, as its conversion script stores them; and, when vocab
// is not nil, that SentencePiece vocabulary (Llama2cVocab of a llama2.c
// tokenizer, or a GGUF file's) as tokenizer.json and tokenizer_config.json
// (tokenizer.ToHF) with a generation_config.json naming its BOS and EOS.
func WriteHF(dir string, ws Weights, vocab *tokenizer.Vocab, dtype safetensors.DType, shards int) error {
	cfg := ws.Config()
	if cfg.QKVBias || cfg.QKNorm || cfg.RopeScaling != nil {
		return fmt.Errorf("llama: WriteHF writes Llama configurations only")
	}
	if dtype != safetensors.F32 && dtype != safetensors.BF16 {
		return fmt.Errorf("llama: WriteHF: dtype %s (F32 or BF16)", dtype)
	}
	// The tokenizer files, read back (which checks them) for the ids
	// config.json and generation_config.json name.
	var files tokenizer.Files
	bos, eos := llama2c.BOS, llama2c.EOS
	if vocab != nil {
		if len(vocab.Tokens) != cfg.Vocab {
			return fmt.Errorf("llama: WriteHF: the tokenizer has %d tokens, the model %d", len(vocab.Tokens), cfg.Vocab)
		}
		var err error
		if files, err = tokenizer.ToHF(vocab, tokenizer.HFOptions{}); err != nil {
			return fmt.Errorf("llama: WriteHF: %w", err)
		}
		m, err := tokenizer.FromFiles(files)
		if err != nil {
			return fmt.Errorf("llama: WriteHF: the written tokenizer does not read back: %w", err)
		}
		sp := m.Special()
		bos, eos = sp.BOS, -1
		if len(sp.EOS) > 0 {
			eos = sp.EOS[0]
		}
	}
	ids := func(m map[string]any) map[string]any {
		m["bos_token_id"], m["eos_token_id"] = nil, nil
		if bos >= 0 {
			m["bos_token_id"] = bos
		}
		if eos >= 0 {
			m["eos_token_id"] = eos
		}
		return m
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := ids(map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama", "hidden_size": cfg.Dim,
		"intermediate_size": cfg.Hidden, "num_hidden_layers": cfg.Layers, "num_attention_heads": cfg.Heads,
		"num_key_value_heads": cfg.KVHeads, "head_dim": cfg.HeadDim, "vocab_size": cfg.Vocab,
		"max_position_embeddings": cfg.SeqLen, "rms_norm_eps": cfg.NormEps, "rope_theta": cfg.RopeTheta,
		"tie_word_embeddings": cfg.TiedEmbeddings, "hidden_act": "silu", "attention_bias": false, "mlp_bias": false,
		"torch_dtype":  map[safetensors.DType]string{safetensors.F32: "float32", safetensors.BF16: "bfloat16"}[dtype],
		"rope_scaling": nil,
	})
	js, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o644); err != nil {
		return err
	}
	if vocab != nil {
		if err := tokenizer.WriteHFDir(dir, files); err != nil {
			return err
		}
		gen, err := json.MarshalIndent(ids(map[string]any{}), "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), append(gen, '\n'), 0o644); err != nil {
			return err
		}
	}
	type item struct {
		role  string
		layer int
	}
	items := []item{{RoleEmbedding, -1}}
	for l := range cfg.Layers {
		for _, r := range []string{RoleAttnNorm, RoleQ, RoleK, RoleV, RoleO, RoleFFNNorm, RoleGate, RoleUp, RoleDown} {
			items = append(items, item{r, l})
		}
	}
	items = append(items, item{RoleOutputNorm, -1})
	if !cfg.TiedEmbeddings {
		items = append(items, item{RoleOutput, -1})
	}
	shards = max(1, min(shards, len(items)))
	per := (len(items) + shards - 1) / shards
	weightMap := map[string]string{}
	var total int64
	for s := range shards {
		name := safetensors.SingleName
		if shards > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, shards)
		}
		var ts []safetensors.WriteTensor
		for _, it := range items[min(len(items), s*per):min(len(items), (s+1)*per)] {
			w, ok, err := ws.Weight(it.role, it.layer)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("llama: WriteHF: no %s of layer %d", it.role, it.layer)
			}
			rows := make([]float32, w.Rows*w.Cols)
			_, bb := w.Type.BlockSize()
			be, _ := w.Type.BlockSize()
			srcRow := w.Cols / int(be) * int(bb)
			for r := range w.Rows {
				sr := r
				if (it.role == RoleQ || it.role == RoleK) && !w.RotateHalf {
					// Interleaved pairs into rotate-half: HF's row r is the
					// interleaved row rotateHalfFrom(r).
					sr = rotateHalfFrom(r, cfg.HeadDim)
				}
				if err := decodeRow(w.Type, w.Data[sr*srcRow:(sr+1)*srcRow], rows[r*w.Cols:(r+1)*w.Cols]); err != nil {
					return err
				}
			}
			var data []byte
			if dtype == safetensors.BF16 {
				data = BF16Bytes(rows)
			} else {
				data = make([]byte, 4*len(rows))
				for i, x := range rows {
					binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
				}
			}
			shape := []int64{int64(w.Rows), int64(w.Cols)}
			if w.Rows == 1 {
				shape = []int64{int64(w.Cols)}
			}
			hn := hfName(it.role, it.layer)
			ts = append(ts, safetensors.WriteTensor{Name: hn, DType: dtype, Shape: shape, Data: data})
			weightMap[hn] = name
			total += int64(len(data))
		}
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := safetensors.Write(f, ts, map[string]string{"format": "pt"}); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if shards > 1 {
		idx, err := safetensors.Index(weightMap, total)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, safetensors.IndexName), idx, 0o644)
	}
	return nil
}
