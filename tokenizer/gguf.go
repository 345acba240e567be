package tokenizer

import (
	"fmt"
	"slices"
	"strings"
)

// Token types of a GGUF vocabulary (tokenizer.ggml.token_type).
const (
	TypeNormal      = 1
	TypeUnknown     = 2
	TypeControl     = 3
	TypeUserDefined = 4
	TypeUnused      = 5
	TypeByte        = 6
)

// Vocab is a GGUF vocabulary as plain data: the tokenizer.ggml.* values of
// a model file (and general.name, which llama.cpp keys a few token
// attributes on). Ids absent from the file are -1 (FromVocab then gives a
// "llama" vocabulary llama.cpp's defaults).
type Vocab struct {
	Model  string    // tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (BPE)
	Pre    string    // tokenizer.ggml.pre ("" is "default")
	Name   string    // general.name
	Tokens []string  // tokenizer.ggml.tokens
	Scores []float32 // tokenizer.ggml.scores (llama)
	Types  []int32   // tokenizer.ggml.token_type (nil: all normal)
	Merges []string  // tokenizer.ggml.merges (gpt2): "left right"

	BOS, EOS, EOT, EOM, UNK, PAD int
	// AddBOS, AddEOS and AddSpacePrefix are nil when the file does not say
	// (then llama.cpp's defaults for the model apply).
	AddBOS, AddEOS, AddSpacePrefix *bool
	ChatTemplate                   string // tokenizer.chat_template
}

// NoToken is the id of a special token a vocabulary does not have.
const NoToken = -1

// ggufEncoder encodes as llama.cpp does.
type ggufEncoder struct {
	spm            *spm
	bpe            *bpe
	pre            []matcher
	specials       []ggufSpecial // by length, longest first
	addSpacePrefix bool
	types          []int32
}

type ggufSpecial struct {
	id             int
	text           string
	user           bool // user-defined: matched even when special tokens are not parsed
	lstrip, rstrip bool
}

// llama.cpp's pre-tokenizers by tokenizer.ggml.pre.
var (
	gpt2Pattern   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
	llama3Pattern = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Pattern  = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

	ggufPre = map[string][]string{
		"default":          {`[\p{P}\$\+<=>\^~\|]+`, gpt2Pattern, `\p{N}+`, `[0-9][0-9][0-9]`},
		"llama3":           {llama3Pattern},
		"llama-v3":         {llama3Pattern},
		"llama-bpe":        {llama3Pattern},
		"falcon3":          {llama3Pattern},
		"pixtral":          {llama3Pattern},
		"dbrx":             {llama3Pattern},
		"smaug-bpe":        {llama3Pattern},
		"qwen2":            {qwen2Pattern},
		"stablelm2":        {qwen2Pattern},
		"deepseek-r1-qwen": {qwen2Pattern},
		"gpt-2":            {gpt2Pattern},
		"phi-2":            {gpt2Pattern},
		"mpt":              {gpt2Pattern},
		"olmo":             {gpt2Pattern},
		"starcoder":        {`\p{N}`, gpt2Pattern},
		"refact":           {`\p{N}`, gpt2Pattern},
		"smollm":           {`\p{N}`, gpt2Pattern},
		"command-r":        {`\p{N}`, gpt2Pattern},
		"falcon":           {"[\\p{P}\\$\\+<=>\\^~\\|`]+", gpt2Pattern, `[0-9][0-9][0-9]`},
		// The ranges are llama.cpp's; the singletons that Unicode normalization
		// would change (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A) are escaped.
		"deepseek-llm": {
			"[\r\n]",
			"\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝ\\x{1F5F}-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌ\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
			"\\s?[!-/:-~！-／：-～‘-‟　-。]+",
			"\\s+$",
			"[一-龥ࠀ-一가-퟿]+",
			"\\p{N}+",
		},
		"deepseek-coder": {"[\r\n]", `\s?\p{L}+`, `\s?\p{P}+`, "[一-龥ࠀ-一가-퟿]+", `\p{N}`},
	}
)

// eogTexts are the texts of tokens llama.cpp counts as ending a
// generation when the vocabulary marks them control or user-defined.
var eogTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "<｜end▁of▁sentence｜>"}

// FromVocab builds the tokenizer of a GGUF vocabulary. source names the
// file in messages.
func FromVocab(v *Vocab, source string) (*Model, error) {
	if v == nil {
		return nil, formatErr(source, "", "no vocabulary")
	}
	n := len(v.Tokens)
	if n == 0 {
		return nil, formatErr(source, "tokenizer.ggml.tokens", "missing or empty")
	}
	if n > maxVocab {
		return nil, formatErr(source, "tokenizer.ggml.tokens", "%d tokens, more than %d", n, maxVocab)
	}
	if v.Types != nil && len(v.Types) != n {
		return nil, formatErr(source, "tokenizer.ggml.token_type", "%d types for %d tokens", len(v.Types), n)
	}
	if v.Model == "llama" {
		v = llamaDefaults(v)
	}
	types := v.Types
	if types == nil {
		types = make([]int32, n)
		for i := range types {
			types[i] = TypeNormal
		}
	}
	for i, t := range types {
		if t < TypeNormal || t > TypeByte {
			return nil, formatErr(source, "tokenizer.ggml.token_type", "token %d has type %d (want 1-6)", i, t)
		}
	}
	checkID := func(field string, id int) error {
		if id != NoToken && (id < 0 || id >= n) {
			return formatErr(source, field, "id %d is out of the vocabulary (%d tokens)", id, n)
		}
		return nil
	}
	for _, f := range []struct {
		field string
		id    int
	}{{"tokenizer.ggml.bos_token_id", v.BOS}, {"tokenizer.ggml.eos_token_id", v.EOS}, {"tokenizer.ggml.eot_token_id", v.EOT},
		{"tokenizer.ggml.eom_token_id", v.EOM}, {"tokenizer.ggml.unknown_token_id", v.UNK}, {"tokenizer.ggml.padding_token_id", v.PAD}} {
		if err := checkID(f.field, f.id); err != nil {
			return nil, err
		}
	}
	m := &Model{source: source, tokens: slices.Clone(v.Tokens), control: make([]bool, n)}
	if v.ChatTemplate != "" {
		m.templates = map[string]string{"default": v.ChatTemplate}
	}
	ids := make(map[string]int32, n)
	for i, t := range v.Tokens {
		ids[t] = int32(i) // the last id holding a text wins, as in llama.cpp
		m.control[i] = types[i] == TypeControl || types[i] == TypeUnknown
	}
	g := &ggufEncoder{types: types}
	m.gguf = g
	s := Special{BOS: v.BOS, EOT: v.EOT}
	unk := v.UNK
	switch v.Model {
	case "llama":
		if len(v.Scores) != n {
			return nil, formatErr(source, "tokenizer.ggml.scores", "%d scores for %d tokens", len(v.Scores), n)
		}
		sp := &spm{ids: ids, scores: v.Scores, unk: int32(unk)}
		for b := range 256 {
			sp.bytes[b] = -1
			if id, ok := ids[fmt.Sprintf("<0x%02X>", b)]; ok {
				sp.bytes[b] = id
			} else if id, ok := ids[string([]byte{byte(b)})]; ok {
				sp.bytes[b] = id
			}
		}
		g.spm = sp
		g.addSpacePrefix = v.AddSpacePrefix == nil || *v.AddSpacePrefix
		s.AddBOS = v.AddBOS == nil || *v.AddBOS
		s.AddEOS = v.AddEOS != nil && *v.AddEOS
	case "gpt2":
		pre := v.Pre
		if pre == "" {
			pre = "default"
		}
		pats, ok := ggufPre[pre]
		if !ok {
			return nil, formatErr(source, "tokenizer.ggml.pre", "pre-tokenizer %q is not supported", v.Pre)
		}
		for _, p := range pats {
			mt, err := compilePattern(p)
			if err != nil {
				return nil, formatErr(source, "tokenizer.ggml.pre", "%v", err)
			}
			g.pre = append(g.pre, mt)
		}
		b := &bpe{ids: ids, byteLevel: true, unk: -1, merges: make(map[uint64]merge, len(v.Merges)), cache: map[string][]int32{}}
		for i := range 256 {
			b.byteIDs[i] = -1
			if id, ok := ids[string(byteChar[i])]; ok {
				b.byteIDs[i] = id
			}
		}
		for rank, mg := range v.Merges {
			l, r, ok := strings.Cut(mg, " ")
			field := fmt.Sprintf("tokenizer.ggml.merges[%d]", rank)
			if !ok {
				return nil, formatErr(source, field, "%q is not two tokens separated by a space", mg)
			}
			li, ok1 := ids[l]
			ri, ok2 := ids[r]
			mi, ok3 := ids[l+r]
			if !ok1 || !ok2 || !ok3 {
				return nil, formatErr(source, field, "%q names a token that is not in the vocabulary", mg)
			}
			if _, dup := b.merges[pairKey(li, ri)]; !dup {
				b.merges[pairKey(li, ri)] = merge{rank: int32(rank), id: mi}
			}
		}
		g.bpe = b
		s.AddBOS = v.AddBOS != nil && *v.AddBOS
		s.AddEOS = v.AddEOS != nil && *v.AddEOS
	default:
		return nil, formatErr(source, "tokenizer.ggml.model", "%q is not supported (llama or gpt2)", v.Model)
	}
	if s.AddBOS && s.BOS < 0 {
		return nil, formatErr(source, "tokenizer.ggml.add_bos_token", "true, but there is no bos_token_id")
	}
	if s.AddEOS && v.EOS < 0 {
		return nil, formatErr(source, "tokenizer.ggml.add_eos_token", "true, but there is no eos_token_id")
	}
	addEOS := func(id int) {
		if id >= 0 && !s.IsEOS(id) {
			s.EOS = append(s.EOS, id)
		}
	}
	addEOS(v.EOS)
	addEOS(v.EOT)
	addEOS(v.EOM)
	for i, t := range v.Tokens {
		if (types[i] == TypeControl || types[i] == TypeUserDefined) && slices.Contains(eogTexts, t) {
			addEOS(i)
			if s.EOT < 0 && t != "<|endoftext|>" {
				s.EOT = i
			}
		}
	}
	m.special = s
	// Special tokens, longest first, as llama.cpp partitions the text.
	phi3 := strings.Contains(strings.ToLower(v.Name), "phi-3") || strings.Contains(strings.ToLower(v.Name), "phi3")
	longest := 1
	for i, t := range v.Tokens {
		typ := types[i]
		if typ == TypeControl || typ == TypeUserDefined || typ == TypeUnknown {
			if t == "" {
				continue
			}
			sp := ggufSpecial{id: i, text: t, user: typ == TypeUserDefined}
			if phi3 {
				sp.rstrip = t != "<unk>" && t != "<s>" && t != "<|endoftext|>"
			}
			g.specials = append(g.specials, sp)
		} else if phi3 && t == "</s>" {
			g.specials = append(g.specials, ggufSpecial{id: i, text: t, rstrip: true})
		}
		if typ == TypeByte {
			continue
		}
		l := len(t)
		if g.bpe != nil && typ == TypeNormal {
			l = len(appendFromByteLevel(nil, t))
		}
		longest = max(longest, l)
	}
	slices.SortStableFunc(g.specials, func(a, b ggufSpecial) int { return len(b.text) - len(a.text) })
	m.maxBytes = longest
	if g.bpe != nil && !g.bpe.complete() || g.spm != nil && g.spm.unk < 0 && slices.Contains(g.spm.bytes[:], -1) {
		m.maxBytes = 0 // bytes without a token are dropped
	}
	for _, sp := range g.specials {
		if sp.lstrip || sp.rstrip {
			m.maxBytes = 0
		}
	}
	return m, nil
}

// fragment is a stretch of text or a special token (id >= 0).
type fragment struct {
	text string
	id   int
}

// partition splits text at special tokens the way llama.cpp does: each
// special token, longest first, splits every text fragment at each of its
// occurrences.
func (g *ggufEncoder) partition(text string, parseSpecial bool) []fragment {
	frags := []fragment{{text: text, id: -1}}
	for _, sp := range g.specials {
		if !parseSpecial && !sp.user {
			continue
		}
		var next []fragment
		changed := false
		for _, f := range frags {
			if f.id >= 0 || !strings.Contains(f.text, sp.text) {
				next = append(next, f)
				continue
			}
			changed = true
			rest := f.text
			for {
				i := strings.Index(rest, sp.text)
				if i < 0 {
					if rest != "" {
						next = append(next, fragment{text: rest, id: -1})
					}
					break
				}
				left := rest[:i]
				if sp.lstrip {
					left = strings.TrimRight(left, " \t\n\v\f\r")
				}
				if left != "" {
					next = append(next, fragment{text: left, id: -1})
				}
				next = append(next, fragment{id: sp.id})
				rest = rest[i+len(sp.text):]
				if sp.rstrip {
					rest = strings.TrimLeft(rest, " \t\n\v\f\r")
				}
			}
		}
		if changed {
			frags = next
		}
	}
	return frags
}

func (g *ggufEncoder) encode(m *Model, text string, addSpecial bool) []int {
	return g.encodeOpt(m, text, addSpecial, true)
}

// encodeOpt is llama.cpp's tokenize(text, add_special, parse_special).
func (g *ggufEncoder) encodeOpt(m *Model, text string, addSpecial, parseSpecial bool) []int {
	var out []int
	if addSpecial && m.special.AddBOS {
		out = append(out, m.special.BOS)
	}
	var frags []fragment
	if text != "" {
		frags = g.partition(text, parseSpecial)
	}
	prevSpecial := true
	var sc bpeScratch
	for _, f := range frags {
		if f.id >= 0 {
			out = append(out, f.id)
			prevSpecial = true
			continue
		}
		if g.spm != nil {
			t := f.text
			if g.addSpacePrefix && prevSpecial {
				t = " " + t
			}
			out = g.spm.encode(out, strings.ReplaceAll(t, " ", "▁"))
			prevSpecial = false
			continue
		}
		words := []string{f.text}
		for _, p := range g.pre {
			var next []string
			for _, w := range words {
				eachPiece(p, w, func(piece string) { next = append(next, piece) })
			}
			words = next
		}
		for _, w := range words {
			out = g.bpe.encodeWord(out, w, &sc)
		}
		prevSpecial = false
	}
	if addSpecial && m.special.AddEOS && len(m.special.EOS) > 0 {
		out = append(out, m.special.EOS[0])
	}
	return out
}

// piece is llama.cpp's token_to_piece with special tokens shown, and the
// space SentencePiece prepends dropped at the start of a text.
func (g *ggufEncoder) piece(m *Model, id int, first bool) []byte {
	t := m.tokens[id]
	switch g.types[id] {
	case TypeControl, TypeUnknown, TypeUserDefined:
		return []byte(t)
	case TypeByte:
		if g.spm != nil {
			if b, ok := ByteToken([]byte(t)); ok {
				return []byte{b}
			}
		}
		return appendFromByteLevel(nil, t)
	case TypeUnused:
		return nil
	}
	if g.spm != nil {
		s := strings.ReplaceAll(t, "▁", " ")
		if first && g.addSpacePrefix && strings.HasPrefix(s, " ") {
			s = s[1:]
		}
		return []byte(s)
	}
	return appendFromByteLevel(nil, t)
}
