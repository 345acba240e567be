package tokenizer_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/tokenizer"
)

// tinySPM is a SentencePiece vocabulary whose merges compete: "▁ab" can
// come from "▁a"+"b" or "▁"+"ab", and scores decide.
func tinySPM() *tokenizer.Vocab {
	return &tokenizer.Vocab{Model: "llama",
		Tokens: []string{"<unk>", "<s>", "</s>", "<0x41>", "<0xC3>", "<0xA9>", "▁", "a", "b", "ab", "▁a", "▁ab", "ba", "<tool>"},
		Scores: []float32{0, 0, 0, 0, 0, 0, -10, -11, -12, -1, -2, -3, -4, 0},
		Types: []int32{tokenizer.TypeUnknown, tokenizer.TypeControl, tokenizer.TypeControl, tokenizer.TypeByte, tokenizer.TypeByte, tokenizer.TypeByte,
			1, 1, 1, 1, 1, 1, 1, tokenizer.TypeUserDefined},
		BOS: 1, EOS: 2, UNK: 0, EOT: -1, EOM: -1, PAD: -1}
}

// TestToHF: the written tokenizer.json has merges derived from the scores
// (best first), the control tokens as special added tokens, Llama 2's
// normalizer and decoder and byte fallback; tokenizer_config.json names
// BOS, EOS and unknown and says what is added; and it reads back.
func TestToHF(t *testing.T) {
	f, err := tokenizer.ToHF(tinySPM(), tokenizer.HFOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		Normalizer json.RawMessage `json:"normalizer"`
		Model      struct {
			Type         string         `json:"type"`
			ByteFallback bool           `json:"byte_fallback"`
			UnkToken     string         `json:"unk_token"`
			Vocab        map[string]int `json:"vocab"`
			Merges       [][2]string    `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(f.Tokenizer, &doc); err != nil {
		t.Fatal(err)
	}
	// ab (-1) from a+b; ▁a (-2) from ▁+a; ▁ab (-3) from ▁+ab and ▁a+b
	// (halves by id); ba (-4) from b+a. No merge involves a byte, control
	// or user-defined token.
	want := [][2]string{{"a", "b"}, {"▁", "a"}, {"▁", "ab"}, {"▁a", "b"}, {"b", "a"}}
	if !slices.Equal(doc.Model.Merges, want) {
		t.Errorf("merges %q, want %q", doc.Model.Merges, want)
	}
	if doc.Model.Type != "BPE" || !doc.Model.ByteFallback || doc.Model.UnkToken != "<unk>" || len(doc.Model.Vocab) != 14 || doc.Model.Vocab["▁ab"] != 11 {
		t.Errorf("model %+v", doc.Model)
	}
	if len(doc.AddedTokens) != 4 || doc.AddedTokens[1].Content != "<s>" || !doc.AddedTokens[1].Special || doc.AddedTokens[3].Content != "<tool>" || doc.AddedTokens[3].Special {
		t.Errorf("added tokens %+v", doc.AddedTokens)
	}
	if !strings.Contains(string(doc.Normalizer), `"Prepend"`) || strings.Contains(string(f.Tokenizer), `\u003c`) {
		t.Errorf("normalizer %s (or HTML-escaped text)", doc.Normalizer)
	}
	var cfg map[string]any
	if err := json.Unmarshal(f.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["bos_token"] != "<s>" || cfg["eos_token"] != "</s>" || cfg["add_bos_token"] != true || cfg["add_eos_token"] != false || cfg["split_special_tokens"] != true {
		t.Errorf("tokenizer_config.json %v", cfg)
	}
	m, err := tokenizer.FromFiles(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		text string
		ids  []int
	}{
		{"ab", []int{1, 11}},           // ▁ab
		{"ab ba", []int{1, 11, 6, 12}}, // ▁ab ▁ ba
		{"Aé", []int{1, 6, 3, 4, 5}},   // bytes for what has no piece
		{"<s>", []int{1, 6, 0}},        // plain text without pieces: one fused unknown
		{"", []int{1}},
	} {
		if got := m.Encode(c.text, true); !slices.Equal(got, c.ids) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.ids)
		}
	}
	if got := tokenizer.Decode(m, []int{1, 11, 6, 12, 3, 4, 5}, true); got != "ab baAé" {
		t.Errorf("Decode = %q", got)
	}
	// ParseSpecial: <s> in a text is BOS.
	f, err = tokenizer.ToHF(tinySPM(), tokenizer.HFOptions{ParseSpecial: true})
	if err != nil {
		t.Fatal(err)
	}
	if m, err = tokenizer.FromFiles(f); err != nil {
		t.Fatal(err)
	}
	if got := m.Encode("<s>ab", false); !slices.Equal(got, []int{1, 11}) {
		t.Errorf("with ParseSpecial, Encode(<s>ab) = %v", got)
	}
}

// TestToHFErrors: what ToHF cannot write faithfully is an error.
func TestToHFErrors(t *testing.T) {
	dup := tinySPM()
	dup.Tokens[12] = "ab"
	gpt2 := tinySPM()
	gpt2.Model = "gpt2"
	noPrefix := tinySPM()
	noPrefix.AddSpacePrefix = new(bool)
	short := tinySPM()
	short.Scores = short.Scores[:3]
	for name, v := range map[string]*tokenizer.Vocab{"duplicate": dup, "gpt2": gpt2, "no space prefix": noPrefix, "scores": short, "nil": nil} {
		if _, err := tokenizer.ToHF(v, tokenizer.HFOptions{}); !errors.Is(err, tokenizer.ErrFormat) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestToHFLlamaSPM: Llama 2's own 32000-token SentencePiece vocabulary
// (llama.cpp's test vocabulary), written as tokenizer.json, encodes
// llama.cpp's test texts to the ids its test expects, and (special tokens
// parsed, as llama.cpp parses them) as llama.cpp's SentencePiece encoder
// does a corpus of random texts; it decodes them back.
func TestToHFLlamaSPM(t *testing.T) {
	base := filepath.Join("testdata", "vocab", "ggml-vocab-llama-spm.gguf")
	g, err := gguf.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	v, err := g.Vocab()
	g.Close()
	if err != nil {
		t.Fatal(err)
	}
	spm, err := tokenizer.FromVocab(v, base)
	if err != nil {
		t.Fatal(err)
	}
	f, err := tokenizer.ToHF(v, tokenizer.HFOptions{ParseSpecial: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := tokenizer.FromFiles(f)
	if err != nil {
		t.Fatal(err)
	}
	texts, want := vocabCases(t, base)
	for i, text := range texts {
		if got := m.Encode(text, false); !slices.Equal(got, want[i]) && !(len(got) == 0 && len(want[i]) == 0) {
			t.Errorf("Encode(%q) =\n %v, want\n %v", text, got, want[i])
		}
	}
	r := rand.New(rand.NewPCG(9, 10))
	extra := []string{" ", "  ", "\n", "\t", "é", "日本", "🙂", "<s>", "</s>", "'s", "123", "\x00", "ÿ"}
	for range 500 {
		var b strings.Builder
		for range 1 + r.IntN(10) {
			if r.IntN(3) == 0 {
				b.WriteString(extra[r.IntN(len(extra))])
			} else {
				b.WriteString(strings.ReplaceAll(v.Tokens[3+256+r.IntN(len(v.Tokens)-259)], "▁", " "))
			}
		}
		s := b.String()
		w := tokenizer.EncodeLlamaCpp(spm, s, true, true)
		got := m.Encode(s, true)
		if !slices.Equal(got, w) {
			t.Errorf("%q: tokenizer.json %v, llama.cpp %v", s, got, w)
			continue
		}
		if back := tokenizer.Decode(m, got, false); back != tokenizer.Decode(spm, w, false) {
			t.Errorf("%q: tokenizer.json decodes %q, llama.cpp %q", s, back, tokenizer.Decode(spm, w, false))
		}
	}
}
