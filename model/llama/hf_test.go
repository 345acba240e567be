package llama

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/internal/bounded"
	"github.com/reprise-ml/reprise/model/safetensors"
	"github.com/reprise-ml/reprise/model/stories260k"
	"github.com/reprise-ml/reprise/tokenizer"
)

const tok512 = "../stories260k/tok512.bin"

// writeStoriesHF writes the embedded stories260K as a Hugging Face
// directory.
func writeStoriesHF(t *testing.T, dtype safetensors.DType, shards int) string {
	t.Helper()
	return writeStoriesHFTok(t, dtype, shards, false)
}

// writeStoriesHFTok is writeStoriesHF with the tokenizer files when
// withTokenizer.
func writeStoriesHFTok(t *testing.T, dtype safetensors.DType, shards int, withTokenizer bool) string {
	t.Helper()
	ck, tok, err := Default()
	must(t, err)
	var vocab *tokenizer.Vocab
	if withTokenizer {
		vocab = Llama2cVocab(tok)
	}
	dir := filepath.Join(t.TempDir(), "stories260K-hf")
	must(t, WriteHF(dir, CheckpointWeights(ck), vocab, dtype, shards))
	return dir
}

// TestHFStories260K: the project's Hugging Face export of stories260K (q and
// k in rotate-half order, its tokenizer as tokenizer.json) generates the
// reference text with the directory's own tokenizer, from one file and
// from shards, replayed and eager.
func TestHFStories260K(t *testing.T) {
	dev := cpuDevice(t)
	prompt := []int32{1, 403, 407, 261, 378, 100, 7, 300, 511}
	embedded := prefillLogits(t, dev, Source{}, prompt)
	for _, shards := range []int{1, 3} {
		dir := writeStoriesHFTok(t, safetensors.F32, shards, true)
		if f, err := Detect(dir); f != FormatHuggingFace || err != nil {
			t.Fatalf("Detect: %q %v", f, err)
		}
		l, err := OpenSource(Source{Model: dir})
		must(t, err)
		if l.Name != "stories260K-hf" || l.Weights.Config().SeqLen != 512 {
			t.Fatalf("name %q, %v", l.Name, l.Weights.Config())
		}
		if l.Vocab == nil || l.Tokenizer != nil {
			t.Fatalf("the directory's own tokenizer.json was not used (vocab %v, llama2.c tokenizer %v)", l.Vocab != nil, l.Tokenizer != nil)
		}
		l.Close()
		// The export's logits are the embedded model's, bit for bit.
		got := prefillLogits(t, dev, Source{Model: dir}, prompt)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(embedded[i]) {
				t.Fatalf("shards %d: logit %d is %v, the embedded model's %v", shards, i, got[i], embedded[i])
			}
		}
		for _, c := range []struct {
			prompt string
			graphs bool
		}{{"Once upon a time", shards == 3}, {"The little dog", shards == 1}} {
			want, _ := stories260k.Reference(c.prompt)
			if got := generateText(t, dev, Source{Model: dir}, c.graphs, c.prompt, stories260k.ReferenceSteps); got != want {
				t.Errorf("shards %d, %q, graphs %v:\ngot  %q\nwant %q", shards, c.prompt, c.graphs, got, want)
			}
		}
	}
	// Without a tokenizer the directory is refused, saying why.
	dir := writeStoriesHF(t, safetensors.BF16, 1)
	if _, err := OpenSource(Source{Model: dir}); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "no tokenizer.json (pass --tokenizer)") {
		t.Errorf("no tokenizer: %v", err)
	}
	// bf16 safetensors load.
	m, _, err := Open(dev, Source{Model: dir, Tokenizer: tok512}, Options{Weights: accel.BF16})
	must(t, err)
	m.Close()
}

func editJSON(t *testing.T, path string, edit func(map[string]any)) {
	t.Helper()
	raw, err := os.ReadFile(path)
	must(t, err)
	var m map[string]any
	must(t, json.Unmarshal(raw, &m))
	edit(m)
	raw, err = json.Marshal(m)
	must(t, err)
	must(t, os.WriteFile(path, raw, 0o644))
}

func TestHFErrors(t *testing.T) {
	dev := cpuDevice(t)
	base := writeStoriesHF(t, safetensors.F32, 2)
	copyDir := func() string {
		dir := filepath.Join(t.TempDir(), "m")
		must(t, os.MkdirAll(dir, 0o755))
		es, err := os.ReadDir(base)
		must(t, err)
		for _, e := range es {
			b, err := os.ReadFile(filepath.Join(base, e.Name()))
			must(t, err)
			must(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644))
		}
		return dir
	}
	conf := func(edit func(map[string]any)) func(string) {
		return func(dir string) { editJSON(t, filepath.Join(dir, "config.json"), edit) }
	}
	for _, c := range []struct {
		name string
		edit func(dir string)
		want string
		is   error
	}{
		{"arch", conf(func(m map[string]any) { m["architectures"] = []string{"GemmaForCausalLM"} }), `"GemmaForCausalLM" is not supported`, nil},
		{"unknown field", conf(func(m map[string]any) { m["attn_logit_softcapping"] = 50 }), `field "attn_logit_softcapping"`, ErrNotImplemented},
		{"moe", conf(func(m map[string]any) { m["num_local_experts"] = 8 }), `field "num_local_experts"`, ErrNotImplemented},
		{"yarn", conf(func(m map[string]any) { m["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 4} }), `"rope_scaling.type": not implemented`, ErrNotImplemented},
		{"gelu", conf(func(m map[string]any) { m["hidden_act"] = "gelu" }), `"hidden_act"`, ErrNotImplemented},
		{"attention bias", conf(func(m map[string]any) { m["attention_bias"] = true }), `"attention_bias"`, ErrNotImplemented},
		// Qwen2 and Qwen3 declare biases and q/k norms Llama's tensors lack.
		{"qwen2", conf(func(m map[string]any) { m["architectures"] = []string{"Qwen2ForCausalLM"} }), "no tensor blk.0.attn_q.bias", nil},
		{"qwen3", conf(func(m map[string]any) { m["architectures"] = []string{"Qwen3ForCausalLM"} }), "no tensor blk.0.attn_q_norm", nil},
		{"shape", conf(func(m map[string]any) { m["intermediate_size"] = 160 }), `"model.layers.0.mlp.gate_proj.weight" of `, nil},
		{"kv heads", conf(func(m map[string]any) { m["num_key_value_heads"] = 8 }), `"model.layers.0.self_attn.k_proj.weight" of `, nil},
		{"duplicate field", func(dir string) {
			p := filepath.Join(dir, "config.json")
			b, _ := os.ReadFile(p)
			must(t, os.WriteFile(p, []byte(strings.Replace(string(b), "{", `{"vocab_size": 1,`, 1)), 0o644))
		}, `field "vocab_size" appears twice`, nil},
		{"missing shard", func(dir string) { must(t, os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))) }, "model-00002-of-00002.safetensors", os.ErrNotExist},
		{"truncated shard", func(dir string) {
			p := filepath.Join(dir, "model-00001-of-00002.safetensors")
			b, _ := os.ReadFile(p)
			must(t, os.WriteFile(p, b[:len(b)-100], 0o644))
		}, "lie beyond the end of the file", safetensors.ErrMalformed},
		{"tied but separate", conf(func(m map[string]any) { m["tie_word_embeddings"] = false }), "no tensor output", nil},
		{"no config", func(dir string) { must(t, os.Remove(filepath.Join(dir, "config.json"))) }, "a directory without config.json", ErrUnknownFormat},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDir()
			c.edit(dir)
			m, _, err := Open(dev, Source{Model: dir, Tokenizer: tok512}, Options{})
			if err == nil {
				m.Close()
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), dir) || (c.is != nil && !errors.Is(err, c.is)) {
				t.Fatalf("error %q, want one naming %s and containing %q", err, dir, c.want)
			}
		})
	}
	// An extra tensor the architecture does not use is refused.
	dir := copyDir()
	p := filepath.Join(dir, "model-00001-of-00002.safetensors")
	st, err := safetensors.Open(p)
	must(t, err)
	var ts []safetensors.WriteTensor
	for _, x := range st.Tensors {
		ts = append(ts, safetensors.WriteTensor{Name: x.Name, DType: x.DType, Shape: x.Shape, Data: append([]byte(nil), st.Data(x)...)})
	}
	st.Close()
	ts = append(ts, safetensors.WriteTensor{Name: "model.layers.0.self_attn.o_proj.bias", DType: safetensors.F32, Shape: []int64{64}, Data: make([]byte, 256)})
	f, err := os.Create(p)
	must(t, err)
	must(t, safetensors.Write(f, ts, nil))
	f.Close()
	editJSON(t, filepath.Join(dir, safetensors.IndexName), func(m map[string]any) {
		m["weight_map"].(map[string]any)["model.layers.0.self_attn.o_proj.bias"] = "model-00001-of-00002.safetensors"
	})
	if _, _, err := Open(dev, Source{Model: dir, Tokenizer: tok512}, Options{}); err == nil || !strings.Contains(err.Error(), `"model.layers.0.self_attn.o_proj.bias"`) {
		t.Errorf("extra tensor: %v", err)
	}
}

// A config.json that is a device behind a symlink reports size 0 to Stat and
// then reads for ever: it must be refused, not read.
func TestHFConfigFromDevice(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
	_, err := OpenHF(dir)
	if !errors.Is(err, bounded.ErrNotRegular) || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("got %v, want a not-a-regular-file error naming config.json", err)
	}
}

// A config.json cut short, or with bytes after its object, is refused.
func TestHFConfigTruncatedOrTrailing(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ text, want string }{
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":64`, "does not end"},
		{`{"architectures":["LlamaForCausalLM"]} trailing`, "bytes after"},
	} {
		p := filepath.Join(dir, "config.json")
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := HFConfig(p); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%q: got %v, want an error naming config.json saying %q", c.text, err, c.want)
		}
	}
}
