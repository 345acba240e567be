package llama

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/model/safetensors"
)

// Inspection is what a model file or directory holds, for `reprise
// inspect`.
type Inspection struct {
	Path         string `json:"path"`
	Format       string `json:"format"`
	Architecture string `json:"architecture,omitempty"`
	Name         string `json:"name,omitempty"`
	// Config is the decoder the loader would build, or ConfigError why it
	// would not (the file is still described).
	Config      *Config `json:"config,omitempty"`
	ConfigError string  `json:"config_error,omitempty"`
	// ContextLength is what the file declares.
	ContextLength int   `json:"context_length,omitempty"`
	Params        int64 `json:"params,omitempty"`
	// Tokenizer is the kind of tokenizer the model carries ("" for none).
	Tokenizer    string        `json:"tokenizer"`
	ChatTemplate bool          `json:"chat_template"`
	Bytes        int64         `json:"tensor_bytes"`
	Types        []TypeTotal   `json:"types"`
	Tensors      []TensorEntry `json:"tensors"`
}

// TypeTotal counts the tensors of one type.
type TypeTotal struct {
	Type    string `json:"type"`
	Tensors int    `json:"tensors"`
	Bytes   int64  `json:"bytes"`
}

// TensorEntry is one tensor: its shape as the file gives it.
type TensorEntry struct {
	Name  string  `json:"name"`
	Type  string  `json:"type"`
	Shape []int64 `json:"shape"`
	Bytes int64   `json:"bytes"`
}

func (in *Inspection) add(name, typ string, shape []int64, n int64) {
	in.Tensors = append(in.Tensors, TensorEntry{name, typ, shape, n})
	in.Bytes += n
	for i := range in.Types {
		if in.Types[i].Type == typ {
			in.Types[i].Tensors++
			in.Types[i].Bytes += n
			return
		}
	}
	in.Types = append(in.Types, TypeTotal{typ, 1, n})
}

func (in *Inspection) setConfig(c Config, err error) {
	if err != nil {
		in.ConfigError = err.Error()
		return
	}
	if cerr := c.Check(); cerr != nil {
		in.ConfigError = cerr.Error()
	}
	in.Config, in.ContextLength, in.Params = &c, c.TrainedSeqLen, c.Params()
}

// Inspect describes the model at path (detected as Open detects it).
func Inspect(path string) (*Inspection, error) {
	format, err := Detect(path)
	if err != nil {
		return nil, err
	}
	in := &Inspection{Path: path, Format: format}
	switch format {
	case FormatGGUF:
		f, err := gguf.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in.Architecture, _ = f.Architecture()
		in.Name, _ = f.String("general.name")
		in.setConfig(GGUFConfig(f))
		if in.Config == nil {
			if n, err := f.Int(in.Architecture + ".context_length"); err == nil {
				in.ContextLength = int(n)
			}
		}
		if m, err := f.String("tokenizer.ggml.model"); err == nil {
			in.Tokenizer = "gguf " + m
			if p, err := f.String("tokenizer.ggml.pre"); err == nil {
				in.Tokenizer += " (pre-tokenizer " + p + ")"
			}
		}
		in.ChatTemplate = f.Has("tokenizer.chat_template")
		for _, t := range f.Tensors {
			in.add(t.Name, t.Type.String(), t.Shape, t.Size)
		}
	case FormatHuggingFace:
		in.Name = filepath.Base(filepath.Clean(path))
		if obj, err := readJSONObject(filepath.Join(path, "config.json"), 1<<20); err == nil {
			var archs []string
			if json.Unmarshal(obj["architectures"], &archs) == nil && len(archs) > 0 {
				in.Architecture = archs[0]
			}
			var n int
			if json.Unmarshal(obj["max_position_embeddings"], &n) == nil {
				in.ContextLength = n
			}
		}
		in.setConfig(HFConfig(filepath.Join(path, "config.json")))
		if _, err := os.Stat(filepath.Join(path, "tokenizer.json")); err == nil {
			in.Tokenizer = "tokenizer.json"
		}
		if obj, err := readJSONObject(filepath.Join(path, "tokenizer_config.json"), 64<<20); err == nil {
			_, in.ChatTemplate = obj["chat_template"]
		}
		if _, err := os.Stat(filepath.Join(path, "chat_template.jinja")); err == nil {
			in.ChatTemplate = true
		}
		m, err := safetensors.OpenDir(path)
		if err != nil {
			return nil, fmt.Errorf("llama: %w", err)
		}
		defer m.Close()
		for _, n := range m.Names() {
			t, _, _ := m.Tensor(n)
			in.add(n, string(t.DType), t.Shape, t.Size)
		}
	case FormatLlama2c:
		ck, err := llama2c.LoadCheckpoint(path)
		if err != nil {
			return nil, err
		}
		in.Architecture = "llama"
		in.setConfig(FromLlama2c(ck.Config), nil)
		ws := CheckpointWeights(ck)
		for _, role := range []string{RoleEmbedding, RoleOutputNorm, RoleOutput} {
			if w, ok, _ := ws.Weight(role, -1); ok {
				in.add(role, "F32", []int64{int64(w.Rows), int64(w.Cols)}, int64(len(w.Data)))
			}
		}
		for l := range ck.Config.Layers {
			for _, role := range []string{RoleAttnNorm, RoleQ, RoleK, RoleV, RoleO, RoleFFNNorm, RoleGate, RoleDown, RoleUp} {
				if w, ok, _ := ws.Weight(role, l); ok {
					in.add(fmt.Sprintf("blk.%d.%s", l, role), "F32", []int64{int64(w.Rows), int64(w.Cols)}, int64(len(w.Data)))
				}
			}
		}
	default:
		return nil, errors.New("llama: inspect: " + format)
	}
	sort.Slice(in.Types, func(i, j int) bool { return in.Types[i].Bytes > in.Types[j].Bytes })
	return in, nil
}
