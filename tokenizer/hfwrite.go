package tokenizer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"unicode/utf8"
)

// HFOptions tune ToHF.
type HFOptions struct {
	// ParseSpecial lets control tokens written in a text (<s>, </s>) encode
	// as themselves, as Hugging Face tokenizers do by default. Without it
	// tokenizer_config.json says split_special_tokens, and they encode as
	// the plain text they are, as SentencePiece and llama2.c encode them.
	ParseSpecial bool
}

// ToHF writes a SentencePiece-style vocabulary (v.Model "llama", as a
// llama2.c tokenizer or a GGUF file holds it: pieces with "▁" for a space,
// one merge score per piece, token types, the BOS, EOS and unknown ids)
// as the files of a Hugging Face tokenizer that encodes as SentencePiece
// merges by score: a Llama 2 style tokenizer.json (a BPE model with byte
// fallback, the normalizer that prepends "▁" and turns spaces into it, no
// pre-tokenizer, Llama 2's decoder) and a tokenizer_config.json naming
// the special tokens and whether BOS and EOS are added.
//
// The merges are derived from the scores, as Hugging Face's
// convert_slow_tokenizer and llama.cpp derive them: for each normal
// piece, every split into two normal pieces is a merge, and merges are
// ranked by the merged piece's score, highest first (ties by the merged
// piece's id, then by the halves' ids). Pieces whose score is not above
// -1e10 never merge (llama2.c's rule). Control and unknown pieces become
// special added tokens, user-defined ones plain added tokens.
//
// Encoding then equals SentencePiece's (and llama2.c's) except where two
// overlapping pairs would merge into the same piece (a piece that splits
// two ways, "ab"+"a" and "a"+"ba"): score order puts the leftmost first,
// rank order the one listed first; and a text holding "▁" itself reads it
// as a space, as SentencePiece does (llama2.c, whose pieces hold spaces,
// encodes its bytes). Decoding is Llama 2's, which strips the text's
// leading space after turning byte tokens into bytes, so a byte token of a
// space first in a text decodes to nothing (SentencePiece keeps it). Files
// names them "tokenizer.json" and "tokenizer_config.json".
func ToHF(v *Vocab, opts HFOptions) (Files, error) {
	const source = "vocabulary"
	if v == nil || v.Model != "llama" {
		return Files{}, formatErr(source, "tokenizer.ggml.model", "ToHF writes SentencePiece (llama) vocabularies")
	}
	// The checks (and the defaults for BOS, EOS and unknown) of a GGUF
	// vocabulary.
	if _, err := FromVocab(v, source); err != nil {
		return Files{}, err
	}
	v = llamaDefaults(v)
	n := len(v.Tokens)
	typ := func(i int) int32 {
		if v.Types == nil {
			return TypeNormal
		}
		return v.Types[i]
	}
	ids := make(map[string]int32, n)
	for i, t := range v.Tokens {
		if j, dup := ids[t]; dup {
			return Files{}, formatErr(source, "tokenizer.ggml.tokens", "tokens %d and %d are both %q (a tokenizer.json vocabulary maps each text to one id)", j, i, t)
		}
		if t == "" {
			return Files{}, formatErr(source, "tokenizer.ggml.tokens", "token %d is empty", i)
		}
		ids[t] = int32(i)
	}

	// Merges.
	type rule struct{ l, r, id int32 }
	var rules []rule
	mergeable := func(i int32) bool { return typ(int(i)) == TypeNormal }
	for i, t := range v.Tokens {
		if !mergeable(int32(i)) || !(v.Scores[i] > -1e10) {
			continue
		}
		for k := 0; k < len(t); {
			_, size := utf8.DecodeRuneInString(t[k:])
			k += size
			if k >= len(t) {
				break
			}
			l, ok1 := ids[t[:k]]
			r, ok2 := ids[t[k:]]
			if ok1 && ok2 && mergeable(l) && mergeable(r) {
				rules = append(rules, rule{l, r, int32(i)})
			}
		}
	}
	slices.SortFunc(rules, func(a, b rule) int {
		if c := cmp.Compare(v.Scores[b.id], v.Scores[a.id]); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.l, b.l), cmp.Compare(a.r, b.r))
	})
	merges := make([][2]string, len(rules))
	for i, r := range rules {
		merges[i] = [2]string{v.Tokens[r.l], v.Tokens[r.r]}
	}

	// Added tokens.
	var added []hfAdded
	for i := range n {
		switch typ(i) {
		case TypeControl, TypeUnknown:
			added = append(added, hfAdded{ID: &i, Content: v.Tokens[i], Special: true})
		case TypeUserDefined:
			added = append(added, hfAdded{ID: &i, Content: v.Tokens[i]})
		}
	}
	token := func(id int) *string {
		if id < 0 {
			return nil
		}
		return &v.Tokens[id]
	}
	addBOS := v.AddBOS == nil || *v.AddBOS
	addEOS := v.AddEOS != nil && *v.AddEOS
	if v.AddSpacePrefix != nil && !*v.AddSpacePrefix {
		return Files{}, formatErr(source, "tokenizer.ggml.add_space_prefix", "false: ToHF writes Llama 2's normalizer, which prepends the space")
	}

	doc := hfDoc{
		Version:     "1.0",
		AddedTokens: added,
		Normalizer: hfSeq{Type: "Sequence", Normalizers: []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]string{"String": " "}, "content": "▁"},
		}},
		PostProcessor: postProcessor(v, addBOS, addEOS),
		Decoder: hfSeq{Type: "Sequence", Decoders: []any{
			map[string]any{"type": "Replace", "pattern": map[string]string{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"},
			map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
		}},
		Model: hfBPEOut{Type: "BPE", UnkToken: token(v.UNK), FuseUnk: true, ByteFallback: true,
			Vocab: orderedVocab(v.Tokens), Merges: merges},
	}
	tj, err := marshal(doc)
	if err != nil {
		return Files{}, err
	}
	cfg := map[string]any{
		"add_bos_token": addBOS, "add_eos_token": addEOS,
		"bos_token": token(v.BOS), "eos_token": token(v.EOS), "unk_token": token(v.UNK), "pad_token": token(v.PAD),
		"clean_up_tokenization_spaces": false, "split_special_tokens": !opts.ParseSpecial,
		"tokenizer_class": "LlamaTokenizer",
	}
	if v.ChatTemplate != "" {
		cfg["chat_template"] = v.ChatTemplate
	}
	cj, err := marshal(cfg)
	if err != nil {
		return Files{}, err
	}
	return Files{Tokenizer: tj, Config: cj, TokenizerName: "tokenizer.json", ConfigName: "tokenizer_config.json"}, nil
}

// WriteHFDir writes f's tokenizer.json and (when present)
// tokenizer_config.json into dir.
func WriteHFDir(dir string, f Files) error {
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), f.Tokenizer, 0o644); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	if f.Config != nil {
		if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), f.Config, 0o644); err != nil {
			return fmt.Errorf("tokenizer: %w", err)
		}
	}
	return nil
}

// llamaDefaults applies llama.cpp's defaults for a SentencePiece
// vocabulary whose file does not name them: BOS 1, EOS 2, unknown 0 (where
// they exist).
func llamaDefaults(v *Vocab) *Vocab {
	c := *v
	for _, d := range []struct {
		id  *int
		def int
	}{{&c.BOS, 1}, {&c.EOS, 2}, {&c.UNK, 0}} {
		if *d.id == NoToken && d.def < len(v.Tokens) {
			*d.id = d.def
		}
	}
	return &c
}

// postProcessor is Llama 2's TemplateProcessing: BOS (and EOS) around
// each sequence; nil when nothing is added.
func postProcessor(v *Vocab, addBOS, addEOS bool) any {
	if !addBOS && !addEOS {
		return nil
	}
	special := map[string]any{}
	piece := func(id int) map[string]any {
		t := v.Tokens[id]
		special[t] = map[string]any{"id": t, "ids": []int{id}, "tokens": []string{t}}
		return map[string]any{"SpecialToken": map[string]any{"id": t, "type_id": 0}}
	}
	seq := func(name string, typeID int) []any {
		var out []any
		if addBOS {
			p := piece(v.BOS)
			p["SpecialToken"].(map[string]any)["type_id"] = typeID
			out = append(out, p)
		}
		out = append(out, map[string]any{"Sequence": map[string]any{"id": name, "type_id": typeID}})
		if addEOS {
			p := piece(v.EOS)
			p["SpecialToken"].(map[string]any)["type_id"] = typeID
			out = append(out, p)
		}
		return out
	}
	single := seq("A", 0)
	return map[string]any{"type": "TemplateProcessing", "single": single, "pair": append(seq("A", 0), seq("B", 1)...), "special_tokens": special}
}

// The parts of tokenizer.json ToHF writes, in Hugging Face's field order.
type hfDoc struct {
	Version       string    `json:"version"`
	Truncation    any       `json:"truncation"`
	Padding       any       `json:"padding"`
	AddedTokens   []hfAdded `json:"added_tokens"`
	Normalizer    hfSeq     `json:"normalizer"`
	PreTokenizer  any       `json:"pre_tokenizer"`
	PostProcessor any       `json:"post_processor"`
	Decoder       hfSeq     `json:"decoder"`
	Model         hfBPEOut  `json:"model"`
}

type hfSeq struct {
	Type        string `json:"type"`
	Normalizers []any  `json:"normalizers,omitempty"`
	Decoders    []any  `json:"decoders,omitempty"`
}

type hfBPEOut struct {
	Type                    string       `json:"type"`
	Dropout                 any          `json:"dropout"`
	UnkToken                *string      `json:"unk_token"`
	ContinuingSubwordPrefix any          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         any          `json:"end_of_word_suffix"`
	FuseUnk                 bool         `json:"fuse_unk"`
	ByteFallback            bool         `json:"byte_fallback"`
	IgnoreMerges            bool         `json:"ignore_merges"`
	Vocab                   orderedVocab `json:"vocab"`
	Merges                  [][2]string  `json:"merges"`
}

// orderedVocab is written as {"token": id, ...} in id order, as Hugging
// Face writes it (a Go map would be sorted by text).
type orderedVocab []string

func (o orderedVocab) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for id, t := range o {
		if id > 0 {
			b.WriteByte(',')
		}
		k, err := marshal(t)
		if err != nil {
			return nil, err
		}
		b.Write(bytes.TrimSpace(k))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(id))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshal is indented JSON without HTML escaping ("<s>", not "\u003cs>").
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return b.Bytes(), nil
}
