package tokenizer

import "sync"

// Model is a Tokenizer read from a tokenizer.json file or built from a GGUF
// vocabulary.
type Model struct {
	source    string   // the file or vocabulary, for messages
	tokens    []string // id -> its text (model-side form; an added token's content)
	control   []bool
	special   Special
	maxBytes  int
	dec       decoder
	decAdded  bool // added tokens go through the decoder too (Hugging Face)
	addedIDs  map[int]bool
	templates map[string]string // chat templates by name

	// Hugging Face encoding.
	addedRaw, addedNorm *addedMatcher
	norm                normalizer
	pre                 preTokenizer
	bpe                 *bpe
	prefix, suffix      []int

	// GGUF encoding (see gguf.go).
	gguf *ggufEncoder

	scratch sync.Pool
}

var _ Tokenizer = (*Model)(nil)

// VocabSize implements Tokenizer.
func (m *Model) VocabSize() int { return len(m.tokens) }

// Special implements Tokenizer.
func (m *Model) Special() Special {
	s := m.special
	s.EOS = append([]int(nil), s.EOS...)
	return s
}

// IsControl implements Tokenizer.
func (m *Model) IsControl(id int) bool { return id >= 0 && id < len(m.control) && m.control[id] }

// MaxBytesPerToken implements Tokenizer.
func (m *Model) MaxBytesPerToken() int { return m.maxBytes }

// Token returns the text of id as the vocabulary stores it ("" when out of
// range).
func (m *Model) Token(id int) string {
	if id < 0 || id >= len(m.tokens) {
		return ""
	}
	return m.tokens[id]
}

// ChatTemplates returns the chat templates the tokenizer files carry, by
// name ("default" for a single one); nil when there are none.
func (m *Model) ChatTemplates() map[string]string {
	if len(m.templates) == 0 {
		return nil
	}
	out := make(map[string]string, len(m.templates))
	for k, v := range m.templates {
		out[k] = v
	}
	return out
}

// Piece implements Tokenizer.
func (m *Model) Piece(prev, id int) []byte {
	if id < 0 || id >= len(m.tokens) {
		return nil
	}
	first := prev < 0 || prev == m.special.BOS && m.special.BOS >= 0
	if m.gguf != nil {
		return m.gguf.piece(m, id, first)
	}
	if m.addedIDs[id] && !m.decAdded {
		return []byte(m.tokens[id])
	}
	return m.dec.piece(m.tokens[id], first)
}

// Encode implements Tokenizer.
func (m *Model) Encode(text string, addSpecial bool) []int {
	if m.gguf != nil {
		return m.gguf.encode(m, text, addSpecial)
	}
	// About four bytes a token for English: one allocation, not a dozen.
	out := make([]int, 0, len(text)/4+len(m.prefix)+len(m.suffix)+1)
	if addSpecial {
		out = append(out, m.prefix...)
	}
	sc, _ := m.scratch.Get().(*bpeScratch)
	if sc == nil {
		sc = &bpeScratch{}
	}
	var words []string
	first := true
	encodeText := func(s string) {
		isFirst := first
		first = false
		if sp, ok := m.pre.(*splitPre); ok && sp.behavior == behaviorIsolated && !sp.invert {
			// The common case (one Isolated split): words straight from
			// the matcher, nothing materialized.
			eachPiece(sp.m, s, func(w string) { out = m.bpe.encodeWord(out, w, sc) })
			return
		}
		words = m.pre.split(words[:0], s, isFirst)
		for _, w := range words {
			out = m.bpe.encodeWord(out, w, sc)
		}
	}
	m.addedRaw.each(text, func(seg string) {
		if m.norm != nil {
			seg = m.norm.normalize(seg)
		}
		m.addedNorm.each(seg, encodeText, func(id int) { out = append(out, id); first = false })
	}, func(id int) { out = append(out, id); first = false })
	m.scratch.Put(sc)
	if addSpecial {
		out = append(out, m.suffix...)
	}
	return out
}
