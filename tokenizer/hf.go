package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/reprise-ml/reprise/internal/bounded"

	"golang.org/x/text/unicode/norm"
)

// Files are the Hugging Face tokenizer files of a model. Tokenizer is
// required; the others may be nil. The names are used in messages.
type Files struct {
	Tokenizer, Config, Generation             []byte
	TokenizerName, ConfigName, GenerationName string
}

// MaxFileBytes bounds a tokenizer file LoadDir reads (a real tokenizer.json
// is 2-30 MB).
const MaxFileBytes = 256 << 20

// LoadDir reads tokenizer.json, and tokenizer_config.json and
// generation_config.json where present, from a model directory.
func LoadDir(dir string) (*Model, error) {
	f := Files{
		TokenizerName:  filepath.Join(dir, "tokenizer.json"),
		ConfigName:     filepath.Join(dir, "tokenizer_config.json"),
		GenerationName: filepath.Join(dir, "generation_config.json"),
	}
	var err error
	if f.Tokenizer, err = readBounded(f.TokenizerName); err != nil {
		return nil, err
	}
	if f.Config, err = readBounded(f.ConfigName); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if f.Generation, err = readBounded(f.GenerationName); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return FromFiles(f)
}

func readBounded(path string) ([]byte, error) {
	b, err := bounded.ReadFile(path, MaxFileBytes)
	if errors.Is(err, bounded.ErrTooLarge) || errors.Is(err, bounded.ErrNotRegular) {
		return nil, fmt.Errorf("tokenizer: %w: %w", err, ErrFormat)
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return b, nil
}

// formatErr is an error about field of file.
func formatErr(file, field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		return fmt.Errorf("tokenizer: %s: %s: %s: %w", file, field, msg, ErrFormat)
	}
	return fmt.Errorf("tokenizer: %s: %s: %w", file, msg, ErrFormat)
}

// hfFile is the part of tokenizer.json this package reads.
type hfFile struct {
	Version       string          `json:"version"`
	AddedTokens   []hfAdded       `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         *hfModel        `json:"model"`
}

type hfAdded struct {
	ID         *int   `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type hfModel struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
}

// typed is the "type" field every component has.
type typed struct {
	Type string `json:"type"`
}

// FromFiles builds the tokenizer of a Hugging Face model from its files.
func FromFiles(f Files) (*Model, error) {
	name := f.TokenizerName
	if name == "" {
		name = "tokenizer.json"
	}
	var hf hfFile
	if err := json.Unmarshal(f.Tokenizer, &hf); err != nil {
		return nil, formatErr(name, "", "not valid JSON: %v", err)
	}
	if hf.Model == nil {
		return nil, formatErr(name, "model", "missing")
	}
	cfg, err := parseConfig(f.Config, orName(f.ConfigName, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	gen, err := parseGeneration(f.Generation, orName(f.GenerationName, "generation_config.json"))
	if err != nil {
		return nil, err
	}
	m := &Model{source: name, decAdded: true, templates: cfg.templates}
	if err := m.readModel(name, hf.Model); err != nil {
		return nil, err
	}
	shrink := 1
	if m.norm, shrink, err = readNormalizer(name, "normalizer", hf.Normalizer); err != nil {
		return nil, err
	}
	// Added tokens: ids may extend the vocabulary.
	// Their ids are held to the bound the vocabulary's are (readModel): a
	// few hundred bytes must not grow the vocabulary to millions of ids.
	m.addedIDs = map[int]bool{}
	idLimit := min(maxVocab, idBound(len(hf.Model.Vocab)+len(hf.AddedTokens)))
	var raw, normed []addedEntry
	for i, a := range hf.AddedTokens {
		field := fmt.Sprintf("added_tokens[%d]", i)
		if a.ID == nil || *a.ID < 0 {
			return nil, formatErr(name, field, "missing or negative id")
		}
		if *a.ID >= idLimit {
			return nil, formatErr(name, field, "id %d is far past the %d tokens of the file", *a.ID, len(hf.Model.Vocab)+len(hf.AddedTokens))
		}
		if a.Content == "" {
			return nil, formatErr(name, field, "empty content")
		}
		id := *a.ID
		for id >= len(m.tokens) {
			m.tokens = append(m.tokens, "")
		}
		m.tokens[id] = a.Content
		m.addedIDs[id] = true
		if a.Special && cfg.splitSpecial {
			continue // split_special_tokens: specials are plain text
		}
		e := addedEntry{id: id, content: a.Content, singleWord: a.SingleWord, lstrip: a.LStrip, rstrip: a.RStrip}
		// As Hugging Face does: normalized (special or not) decides, and a
		// normalized token is sought in the normalized text as its content
		// normalized.
		if a.Normalized {
			if m.norm != nil {
				e.content = m.norm.normalize(e.content)
			}
			normed = append(normed, e)
		} else {
			raw = append(raw, e)
		}
	}
	m.addedRaw, m.addedNorm = newAddedMatcher(raw), newAddedMatcher(normed)
	m.control = make([]bool, len(m.tokens))
	for _, a := range hf.AddedTokens {
		if a.Special {
			m.control[*a.ID] = true
		}
	}
	if m.pre, err = m.readPreTokenizer(name, "pre_tokenizer", hf.PreTokenizer); err != nil {
		return nil, err
	}
	if m.pre == nil {
		m.pre = seqPre(nil)
	}
	if m.dec, err = readDecoder(name, "decoder", hf.Decoder); err != nil {
		return nil, err
	}
	if m.prefix, m.suffix, err = m.readPostProcessor(name, "post_processor", hf.PostProcessor); err != nil {
		return nil, err
	}
	m.setSpecial(cfg, gen, orName(f.ConfigName, "tokenizer_config.json"))
	m.maxBytes = m.bytesBound(shrink, hf.AddedTokens, normed)
	return m, nil
}

func orName(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// maxVocab bounds token ids (no real vocabulary comes near).
const maxVocab = 1 << 24

// idBound is how far the ids of a file with n tokens may reach: gaps are
// allowed (padded vocabularies), ids millions past the tokens are not.
func idBound(n int) int { return 4*n + 1024 }

func (m *Model) readModel(file string, hm *hfModel) error {
	if hm.Type != "BPE" && !(hm.Type == "" && !isNull(hm.Merges)) {
		return formatErr(file, "model.type", "%q is not supported (only BPE)", hm.Type)
	}
	if hm.Dropout != nil && *hm.Dropout > 0 {
		return formatErr(file, "model.dropout", "%v: BPE dropout is not supported (encoding must be deterministic)", *hm.Dropout)
	}
	if hm.ContinuingSubwordPrefix != nil && *hm.ContinuingSubwordPrefix != "" {
		return formatErr(file, "model.continuing_subword_prefix", "%q is not supported", *hm.ContinuingSubwordPrefix)
	}
	if hm.EndOfWordSuffix != nil && *hm.EndOfWordSuffix != "" {
		return formatErr(file, "model.end_of_word_suffix", "%q is not supported", *hm.EndOfWordSuffix)
	}
	if len(hm.Vocab) == 0 {
		return formatErr(file, "model.vocab", "missing or empty")
	}
	b := &bpe{ids: hm.Vocab, unk: -1, fuseUnk: hm.FuseUnk,
		byteFallback: hm.ByteFallback, ignoreMerges: hm.IgnoreMerges, cache: map[string][]int32{}}
	n := 0
	for tok, id := range hm.Vocab {
		if id < 0 || id > maxVocab {
			return formatErr(file, "model.vocab", "token %q has id %d, out of range", tok, id)
		}
		n = max(n, int(id)+1)
	}
	if n > idBound(len(hm.Vocab)) {
		return formatErr(file, "model.vocab", "ids reach %d for %d tokens", n, len(hm.Vocab))
	}
	m.tokens = make([]string, n)
	seen := make([]bool, n)
	for tok, id := range hm.Vocab {
		if seen[id] {
			return formatErr(file, "model.vocab", "id %d is given to %q and %q", id, m.tokens[id], tok)
		}
		seen[id] = true
		m.tokens[id] = tok
	}
	if hm.UnkToken != nil {
		id, ok := b.ids[*hm.UnkToken]
		if !ok {
			return formatErr(file, "model.unk_token", "%q is not in the vocabulary", *hm.UnkToken)
		}
		b.unk = id
	}
	for i := range 256 {
		b.fallback[i] = -1
		if id, ok := b.ids[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.fallback[i] = id
		}
		b.byteIDs[i] = -1
		if id, ok := b.ids[string(byteChar[i])]; ok {
			b.byteIDs[i] = id
		}
	}
	// merges: ["a b", ...] (older files) or [["a", "b"], ...].
	var pairs [][2]string
	if !isNull(hm.Merges) {
		var strs []string
		if err := json.Unmarshal(hm.Merges, &strs); err == nil {
			pairs = make([][2]string, len(strs))
			for i, s := range strs {
				l, r, ok := strings.Cut(s, " ")
				if !ok || strings.Contains(r, " ") {
					return formatErr(file, fmt.Sprintf("model.merges[%d]", i), "%q is not two tokens separated by a space", s)
				}
				pairs[i] = [2]string{l, r}
			}
		} else if err := json.Unmarshal(hm.Merges, &pairs); err != nil {
			return formatErr(file, "model.merges", "neither a list of \"a b\" nor of [\"a\", \"b\"]")
		}
	}
	b.merges = make(map[uint64]merge, len(pairs))
	var buf []byte
	for rank, p := range pairs {
		l, r := p[0], p[1]
		li, ok1 := b.ids[l]
		ri, ok2 := b.ids[r]
		buf = append(append(buf[:0], l...), r...)
		mi, ok3 := b.ids[string(buf)]
		if !ok1 || !ok2 || !ok3 {
			missing := l
			switch {
			case !ok1:
			case !ok2:
				missing = r
			default:
				missing = l + r
			}
			return formatErr(file, fmt.Sprintf("model.merges[%d]", rank), "names %q, which is not in the vocabulary", missing)
		}
		// A pair listed again takes the later rank, as in Hugging Face
		// (its merges are collected into a map).
		b.merges[pairKey(li, ri)] = merge{rank: int32(rank), id: mi}
	}
	m.bpe = b
	return nil
}

// pattern is a Split or Replace pattern: {"String": s} or {"Regex": r}.
type pattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func readNormalizer(file, field string, raw json.RawMessage) (normalizer, int, error) {
	if isNull(raw) {
		return nil, 1, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, 0, formatErr(file, field, "%v", err)
	}
	var n normalizer
	switch t.Type {
	case "NFC":
		n = nfcNorm{norm.NFC}
	case "NFD":
		n = nfcNorm{norm.NFD}
	case "NFKC":
		n = nfcNorm{norm.NFKC}
	case "NFKD":
		n = nfcNorm{norm.NFKD}
	case "Lowercase":
		n = lowercaseNorm{}
	case "Strip":
		var v struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, 0, formatErr(file, field, "%v", err)
		}
		n = stripNorm{v.Left, v.Right}
	case "Prepend":
		var v struct {
			Prepend *string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &v); err != nil || v.Prepend == nil {
			return nil, 0, formatErr(file, field+".prepend", "missing or not a string")
		}
		n = prependNorm{*v.Prepend}
	case "Replace":
		var v struct {
			Pattern pattern `json:"pattern"`
			Content *string `json:"content"`
		}
		if err := json.Unmarshal(raw, &v); err != nil || v.Content == nil {
			return nil, 0, formatErr(file, field, "a Replace needs a pattern and a content")
		}
		if v.Pattern.String == nil || *v.Pattern.String == "" {
			return nil, 0, formatErr(file, field+".pattern", "only a non-empty String pattern is supported")
		}
		n = replaceNorm{*v.Pattern.String, *v.Content}
	case "Sequence":
		var v struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, 0, formatErr(file, field, "%v", err)
		}
		var q seqNorm
		for i, r := range v.Normalizers {
			c, _, err := readNormalizer(file, fmt.Sprintf("%s.normalizers[%d]", field, i), r)
			if err != nil {
				return nil, 0, err
			}
			if c != nil {
				q = append(q, c)
			}
		}
		n = q
	default:
		return nil, 0, formatErr(file, field, "normalizer %q is not supported", t.Type)
	}
	return n, n.shrink(), nil
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

var behaviors = map[string]splitBehavior{
	"Isolated": behaviorIsolated, "Removed": behaviorRemoved, "MergedWithPrevious": behaviorMergedWithPrevious,
	"MergedWithNext": behaviorMergedWithNext, "Contiguous": behaviorContiguous,
}

func (m *Model) readPreTokenizer(file, field string, raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, formatErr(file, field, "%v", err)
	}
	switch t.Type {
	case "Split":
		var v struct {
			Pattern  pattern `json:"pattern"`
			Behavior string  `json:"behavior"`
			Invert   bool    `json:"invert"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, formatErr(file, field, "%v", err)
		}
		b, ok := behaviors[v.Behavior]
		if !ok {
			return nil, formatErr(file, field+".behavior", "%q is not a split behaviour", v.Behavior)
		}
		var mt matcher
		switch {
		case v.Pattern.Regex != nil:
			var err error
			if mt, err = compilePattern(*v.Pattern.Regex); err != nil {
				return nil, formatErr(file, field+".pattern.Regex", "%v", err)
			}
		case v.Pattern.String != nil && *v.Pattern.String != "":
			mt = literalMatcher(*v.Pattern.String)
		default:
			return nil, formatErr(file, field+".pattern", "needs a Regex or a non-empty String")
		}
		return &splitPre{m: mt, behavior: b, invert: v.Invert}, nil
	case "ByteLevel":
		var v struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, formatErr(file, field, "%v", err)
		}
		m.bpe.byteLevel = true
		return byteLevelPre{addPrefixSpace: v.AddPrefixSpace, useRegex: v.UseRegex == nil || *v.UseRegex}, nil
	case "Metaspace":
		var v struct {
			Replacement    string  `json:"replacement"`
			PrependScheme  *string `json:"prepend_scheme"`
			AddPrefixSpace *bool   `json:"add_prefix_space"`
			Split          *bool   `json:"split"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, formatErr(file, field, "%v", err)
		}
		p := metaspacePre{replacement: v.Replacement, prepend: "always", splitWords: v.Split == nil || *v.Split}
		if p.replacement == "" {
			p.replacement = "▁"
		}
		switch {
		case v.PrependScheme != nil:
			p.prepend = *v.PrependScheme
			if p.prepend != "always" && p.prepend != "first" && p.prepend != "never" {
				return nil, formatErr(file, field+".prepend_scheme", "%q is not always, first or never", p.prepend)
			}
		case v.AddPrefixSpace != nil && !*v.AddPrefixSpace:
			p.prepend = "never"
		}
		return p, nil
	case "Digits":
		var v struct {
			Individual bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, formatErr(file, field, "%v", err)
		}
		return digitsPre{individual: v.Individual}, nil
	case "Sequence":
		var v struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, formatErr(file, field, "%v", err)
		}
		var q seqPre
		for i, r := range v.PreTokenizers {
			f := fmt.Sprintf("%s.pretokenizers[%d]", field, i)
			wasByteLevel := m.bpe.byteLevel
			p, err := m.readPreTokenizer(file, f, r)
			if err != nil {
				return nil, err
			}
			if wasByteLevel {
				return nil, formatErr(file, f, "a pre-tokenizer after ByteLevel is not supported")
			}
			if bl, ok := p.(byteLevelPre); ok && !bl.addPrefixSpace && !bl.useRegex {
				continue // only marks the text as bytes: nothing to split
			}
			if p != nil {
				q = append(q, p)
			}
		}
		if len(q) == 1 {
			return q[0], nil
		}
		return q, nil
	}
	return nil, formatErr(file, field, "pre-tokenizer %q is not supported", t.Type)
}

// literalMatcher matches a fixed string.
type literalMatcher string

func (l literalMatcher) each(s string, fn func(start, end int)) {
	for i := 0; i <= len(s)-len(l); {
		j := strings.Index(s[i:], string(l))
		if j < 0 {
			return
		}
		fn(i+j, i+j+len(l))
		i += j + len(l)
	}
}

func readDecoder(file, field string, raw json.RawMessage) (decoder, error) {
	if isNull(raw) {
		return nil, formatErr(file, field, "missing: a tokenizer without a decoder is not supported")
	}
	var out decoder
	fused := false
	var add func(field string, raw json.RawMessage) error
	add = func(field string, raw json.RawMessage) error {
		var t typed
		if err := json.Unmarshal(raw, &t); err != nil {
			return formatErr(file, field, "%v", err)
		}
		var step decodeStep
		switch t.Type {
		case "ByteLevel":
			step = byteLevelDec{}
		case "ByteFallback":
			step = byteFallbackDec{}
		case "Fuse":
			fused = true
			return nil
		case "Replace":
			var v struct {
				Pattern pattern `json:"pattern"`
				Content *string `json:"content"`
			}
			if err := json.Unmarshal(raw, &v); err != nil || v.Content == nil || v.Pattern.String == nil || *v.Pattern.String == "" {
				return formatErr(file, field, "a Replace decoder needs a non-empty String pattern and a content")
			}
			step = replaceDec{[]byte(*v.Pattern.String), []byte(*v.Content)}
		case "Strip":
			var v struct {
				Content string `json:"content"`
				Start   int    `json:"start"`
				Stop    int    `json:"stop"`
			}
			if err := json.Unmarshal(raw, &v); err != nil || v.Content == "" || v.Start < 0 || v.Stop < 0 {
				return formatErr(file, field, "a Strip decoder needs a content and non-negative start and stop")
			}
			step = stripDec{content: []byte(v.Content), start: v.Start, stop: v.Stop, onlyFirst: fused}
		case "Metaspace":
			var v struct {
				Replacement    string  `json:"replacement"`
				PrependScheme  *string `json:"prepend_scheme"`
				AddPrefixSpace *bool   `json:"add_prefix_space"`
			}
			if err := json.Unmarshal(raw, &v); err != nil {
				return formatErr(file, field, "%v", err)
			}
			d := metaspaceDec{replacement: []byte(v.Replacement), prepended: true}
			if v.Replacement == "" {
				d.replacement = []byte("▁")
			}
			if v.PrependScheme != nil && *v.PrependScheme == "never" || v.PrependScheme == nil && v.AddPrefixSpace != nil && !*v.AddPrefixSpace {
				d.prepended = false
			}
			step = d
		case "Sequence":
			var v struct {
				Decoders []json.RawMessage `json:"decoders"`
			}
			if err := json.Unmarshal(raw, &v); err != nil {
				return formatErr(file, field, "%v", err)
			}
			for i, r := range v.Decoders {
				if err := add(fmt.Sprintf("%s.decoders[%d]", field, i), r); err != nil {
					return err
				}
			}
			return nil
		default:
			return formatErr(file, field, "decoder %q is not supported", t.Type)
		}
		if fused {
			if err := checkAfterFuse(t.Type, step); err != nil {
				return formatErr(file, field, "%v", err)
			}
		}
		out = append(out, step)
		return nil
	}
	if err := add(field, raw); err != nil {
		return nil, err
	}
	return out, nil
}

// readPostProcessor returns the ids a whole input gets around it.
func (m *Model) readPostProcessor(file, field string, raw json.RawMessage) (prefix, suffix []int, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, nil, formatErr(file, field, "%v", err)
	}
	switch t.Type {
	case "ByteLevel":
		return nil, nil, nil
	case "TemplateProcessing":
		var v struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
			SpecialTokens map[string]struct {
				IDs []int `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, nil, formatErr(file, field, "%v", err)
		}
		seenSeq := false
		for i, p := range v.Single {
			switch {
			case p.Sequence != nil:
				seenSeq = true
			case p.SpecialToken != nil:
				st, ok := v.SpecialTokens[p.SpecialToken.ID]
				if !ok {
					return nil, nil, formatErr(file, fmt.Sprintf("%s.single[%d]", field, i), "special token %q is not in special_tokens", p.SpecialToken.ID)
				}
				for _, id := range st.IDs {
					if id < 0 || id >= len(m.tokens) {
						return nil, nil, formatErr(file, field+".special_tokens", "id %d is out of the vocabulary (%d)", id, len(m.tokens))
					}
				}
				if seenSeq {
					suffix = append(suffix, st.IDs...)
				} else {
					prefix = append(prefix, st.IDs...)
				}
			default:
				return nil, nil, formatErr(file, fmt.Sprintf("%s.single[%d]", field, i), "neither SpecialToken nor Sequence")
			}
		}
		return prefix, suffix, nil
	case "RobertaProcessing", "BertProcessing":
		var v struct {
			Sep []json.RawMessage `json:"sep"`
			Cls []json.RawMessage `json:"cls"`
		}
		if err := json.Unmarshal(raw, &v); err != nil || len(v.Sep) != 2 || len(v.Cls) != 2 {
			return nil, nil, formatErr(file, field, "sep and cls must be [token, id]")
		}
		var sep, cls int
		if json.Unmarshal(v.Sep[1], &sep) != nil || json.Unmarshal(v.Cls[1], &cls) != nil ||
			sep < 0 || sep >= len(m.tokens) || cls < 0 || cls >= len(m.tokens) {
			return nil, nil, formatErr(file, field, "sep and cls ids must be in the vocabulary")
		}
		return []int{cls}, []int{sep}, nil
	case "Sequence":
		var v struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, nil, formatErr(file, field, "%v", err)
		}
		for i, r := range v.Processors {
			p, s, err := m.readPostProcessor(file, fmt.Sprintf("%s.processors[%d]", field, i), r)
			if err != nil {
				return nil, nil, err
			}
			prefix, suffix = append(p, prefix...), append(suffix, s...)
		}
		return prefix, suffix, nil
	}
	return nil, nil, formatErr(file, field, "post-processor %q is not supported", t.Type)
}

// bytesBound computes MaxBytesPerToken.
func (m *Model) bytesBound(shrink int, added []hfAdded, normed []addedEntry) int {
	if shrink == 0 {
		return 0
	}
	for _, a := range added {
		if a.LStrip || a.RStrip {
			return 0
		}
	}
	b := m.bpe
	if b.unk >= 0 && b.fuseUnk {
		return 0 // fused unknown characters can be any number of them
	}
	if !b.complete() {
		return 0 // characters without a token are dropped
	}
	longest := 1
	for _, t := range m.tokens {
		n := len(t)
		if b.byteLevel && !m.addedIDs[b.idOf(t)] {
			n = utf8.RuneCountInString(t)
		}
		longest = max(longest, n)
	}
	for _, e := range normed {
		longest = max(longest, len(e.content)) // what it matches of the normalized text
	}
	if b.unk >= 0 {
		longest = max(longest, utf8.UTFMax)
	}
	return longest * shrink
}

// complete reports whether every character of any text becomes at least
// one token (none is dropped).
func (b *bpe) complete() bool {
	if b.unk >= 0 {
		return true
	}
	all := func(ids *[256]int32) bool {
		for _, id := range ids {
			if id < 0 {
				return false
			}
		}
		return true
	}
	if b.byteLevel {
		return all(&b.byteIDs)
	}
	return b.byteFallback && all(&b.fallback)
}

func (b *bpe) idOf(t string) int {
	if id, ok := b.ids[t]; ok {
		return int(id)
	}
	return -1
}
