package llama2c

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/reprise-ml/reprise/internal/pairheap"
	"github.com/reprise-ml/reprise/tokenizer"
)

// Special token ids of llama2.c vocabularies.
const (
	// BOS is the beginning-of-sequence token ("\n<s>\n" in sentencepiece
	// exports). The reference generation loop stops when the model emits it.
	BOS = 1
	// EOS is the end-of-sequence token.
	EOS = 2
)

// byteTokenBase is the id of the byte token <0x00>; byte b is token
// byteTokenBase+b.
const byteTokenBase = 3

// Tokenizer is a llama2.c vocabulary: one byte string and one merge score per
// token id. It is read-only after construction and safe for concurrent use.
type Tokenizer struct {
	pieces [][]byte       // token id -> its vocabulary string
	scores []float32      // token id -> merge score
	ids    map[string]int // vocabulary string -> lowest id holding it
	maxLen int            // max_token_length from the file header
}

// ReadTokenizer parses a llama2.c tokenizer file holding exactly vocab tokens:
// an int32 max_token_length, then for each token a float32 score, an int32
// byte length and that many bytes. Malformed data (truncated, a negative
// max_token_length or token length, a token longer than max_token_length, or
// bytes left over after vocab tokens) gives an error wrapping ErrMalformed.
// vocab must be at least 3 (<unk>, BOS and EOS). The bytes are copied.
func ReadTokenizer(data []byte, vocab int) (*Tokenizer, error) {
	if vocab < byteTokenBase {
		return nil, fmt.Errorf("llama2c: tokenizer vocabulary size %d is below 3 (<unk>, BOS, EOS)", vocab)
	}
	if len(data) < 4 {
		return nil, malformed("tokenizer truncated: the header needs 4 bytes, have %d", len(data))
	}
	maxLen := int(int32(binary.LittleEndian.Uint32(data)))
	if maxLen < 0 {
		return nil, malformed("tokenizer header: negative max_token_length %d", maxLen)
	}
	// Every token takes at least 8 bytes: reject impossible sizes before
	// allocating for them.
	if int64(vocab) > int64(len(data)-4)/8 {
		return nil, malformed("tokenizer truncated: %d tokens need at least %d bytes, have %d",
			vocab, 4+8*int64(vocab), len(data))
	}
	t := &Tokenizer{
		pieces: make([][]byte, vocab),
		scores: make([]float32, vocab),
		ids:    make(map[string]int, vocab),
		maxLen: maxLen,
	}
	off := 4
	for i := range vocab {
		if len(data)-off < 8 {
			return nil, malformed("tokenizer truncated at byte %d: token %d of %d needs a score and a length, have %d bytes",
				off, i, vocab, len(data)-off)
		}
		t.scores[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[off:]))
		n := int(int32(binary.LittleEndian.Uint32(data[off+4:])))
		if n < 0 {
			return nil, malformed("tokenizer token %d (byte %d): negative length %d", i, off+4, n)
		}
		if n > maxLen {
			return nil, malformed("tokenizer token %d (byte %d): length %d exceeds max_token_length %d", i, off+4, n, maxLen)
		}
		off += 8
		if len(data)-off < n {
			return nil, malformed("tokenizer truncated at byte %d: token %d of %d needs %d bytes, have %d",
				off, i, vocab, n, len(data)-off)
		}
		p := bytes.Clone(data[off : off+n])
		if p == nil {
			p = []byte{}
		}
		t.pieces[i] = p
		if _, dup := t.ids[string(p)]; !dup {
			t.ids[string(p)] = i
		}
		off += n
	}
	if off != len(data) {
		return nil, malformed("tokenizer has %d trailing bytes after %d tokens (is the vocabulary size right?)",
			len(data)-off, vocab)
	}
	return t, nil
}

// LoadTokenizer reads and parses the tokenizer file at path (see
// ReadTokenizer).
func LoadTokenizer(path string, vocab int) (*Tokenizer, error) {
	// max_token_length, then per token a score, a length and at most
	// max_token_length bytes.
	data, err := readBounded(path, "tokenizer", 4, func(h []byte) (int64, bool) {
		maxLen := int64(int32(binary.LittleEndian.Uint32(h)))
		if maxLen < 0 || vocab < byteTokenBase {
			return 0, false
		}
		return satAdd(4, satMul(int64(vocab), 8+maxLen)), true
	})
	if err != nil {
		return nil, err
	}
	t, err := ReadTokenizer(data, vocab)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return t, nil
}

// Vocab returns the number of tokens.
func (t *Tokenizer) Vocab() int { return len(t.pieces) }

// Token returns token id's vocabulary string (a copy, with spaces as the
// file has them) and merge score; nil and 0 for an id out of range.
func (t *Tokenizer) Token(id int) (piece []byte, score float32) {
	if id < 0 || id >= len(t.pieces) {
		return nil, 0
	}
	return bytes.Clone(t.pieces[id]), t.scores[id]
}

// lookup returns the id of the token whose string is s, or -1.
func (t *Tokenizer) lookup(s []byte) int {
	if id, ok := t.ids[string(s)]; ok {
		return id
	}
	return -1
}

// byteToken returns the byte-fallback token of b, or <unk> (0) when the
// vocabulary is too small to hold byte tokens.
func (t *Tokenizer) byteToken(b byte) int {
	if id := byteTokenBase + int(b); id < len(t.pieces) {
		return id
	}
	return 0
}

// Encode tokenizes text exactly like llama2.c's encode: BOS first when bos is
// set; then, for non-empty text, the token of " " (a dummy prefix space);
// then one token per UTF-8 character (a lead byte and up to three
// continuation bytes) when the vocabulary holds that string, else one byte
// token (id byte+3) per byte; then, repeatedly, the adjacent pair whose
// concatenation is a vocabulary token with the strictly highest score (the
// leftmost pair on ties; scores must exceed -1e10) is merged, until no pair
// merges (BOS takes part in the merging, as in C); finally EOS when eos is
// set. Unlike C, text may contain NUL bytes, which are encoded like any other
// byte. Invalid UTF-8 is grouped as the C code groups it and falls back to
// byte tokens. Where C would misbehave, on vocabularies without a " " token or
// too small to hold byte tokens, the dummy prefix falls back to the byte token
// of ' ' and a byte token that does not exist becomes <unk> (0).
func (t *Tokenizer) Encode(text string, bos, eos bool) []int {
	tokens := make([]int, 0, len(text)+3)
	if bos {
		tokens = append(tokens, BOS)
	}
	if text != "" {
		if id := t.lookup([]byte(" ")); id >= 0 {
			tokens = append(tokens, id)
		} else {
			tokens = append(tokens, t.byteToken(' '))
		}
	}
	isCont := func(b byte) bool { return b&0xC0 == 0x80 }
	start := 0 // start of the current character in text
	for i := 0; i < len(text); i++ {
		if !isCont(text[i]) {
			start = i
		}
		// Extend the character while continuation bytes follow, to at most
		// 4 bytes (the C code's str_len < 4 test).
		if i+1 < len(text) && isCont(text[i+1]) && i+1-start < 4 {
			continue
		}
		char := text[start : i+1]
		if id := t.lookup([]byte(char)); id >= 0 {
			tokens = append(tokens, id)
		} else {
			for j := 0; j < len(char); j++ {
				tokens = append(tokens, t.byteToken(char[j]))
			}
		}
		start = i + 1
	}
	tokens = t.merge(tokens)
	if eos {
		tokens = append(tokens, EOS)
	}
	return tokens
}

// merge applies the BPE merges of Encode to tokens: the pair with the
// highest score merges first, the leftmost among equal scores, as the C
// code's rescan does, but through a heap of candidate pairs over a linked
// list, so a text of n tokens takes O(n log n) instead of O(n^2). A
// candidate is stale once either of its symbols has changed (versions).
func (t *Tokenizer) merge(tokens []int) []int {
	if len(tokens) < 2 {
		return tokens
	}
	var buf []byte
	pairID := func(a, b int) int {
		buf = append(append(buf[:0], t.pieces[a]...), t.pieces[b]...)
		return t.lookup(buf)
	}
	type sym struct {
		id, prev, next int32
		version        int32
		alive          bool
	}
	syms := make([]sym, len(tokens))
	for i, id := range tokens {
		syms[i] = sym{id: int32(id), prev: int32(i - 1), next: int32(i + 1), alive: true}
	}
	syms[len(syms)-1].next = -1
	var h pairheap.Heap[mergeCand]
	push := func(l int32) {
		if l < 0 || syms[l].next < 0 {
			return
		}
		r := syms[l].next
		id := pairID(int(syms[l].id), int(syms[r].id))
		if id < 0 || !(t.scores[id] > -1e10) {
			return
		}
		h.Push(pairheap.ScoreKey(t.scores[id], l), mergeCand{left: l, right: r, id: int32(id), lv: syms[l].version, rv: syms[r].version})
	}
	for i := range len(syms) - 1 {
		push(int32(i))
	}
	for h.Len() > 0 {
		c := h.Pop()
		l, r := &syms[c.left], &syms[c.right]
		if !l.alive || !r.alive || l.next != c.right || l.version != c.lv || r.version != c.rv {
			continue
		}
		l.id = c.id
		l.version++
		r.alive = false
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = c.left
		}
		push(l.prev)
		push(c.left)
	}
	out := tokens[:0]
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, int(syms[i].id))
	}
	return out
}

// mergeCand is a pair that may merge: symbols left and right (at versions
// lv and rv) into token id. The heap orders candidates by score, highest
// first, then leftmost first.
type mergeCand struct {
	left, right, id int32
	lv, rv          int32
}

// Piece returns the decoded bytes of token when it follows prev, as
// llama2.c's decode does: after BOS a leading space is stripped, and a piece
// of exactly the form <0xHH> (hex digits of either case) decodes to that one
// raw byte. It returns nil for an out-of-range token. The result is a fresh
// slice the caller may modify.
func (t *Tokenizer) Piece(prev, token int) []byte {
	if token < 0 || token >= len(t.pieces) {
		return nil
	}
	p := t.pieces[token]
	if prev == BOS && len(p) > 0 && p[0] == ' ' {
		p = p[1:]
	}
	if b, ok := tokenizer.ByteToken(p); ok {
		return []byte{b}
	}
	return append([]byte{}, p...)
}

// SafePiece returns what llama2.c's safe_printf prints for Piece(prev,
// token): the piece up to its first NUL byte (printf's %s stops there);
// nothing for an empty piece; and nothing for a one-byte piece unless that
// byte is printable ASCII or whitespace (C's isprint || isspace in the "C"
// locale). It returns nil when nothing prints.
func (t *Tokenizer) SafePiece(prev, token int) []byte {
	p := t.Piece(prev, token)
	if i := bytes.IndexByte(p, 0); i >= 0 {
		p = p[:i]
	}
	if len(p) == 0 {
		return nil
	}
	if len(p) == 1 && !isPrint(p[0]) && !isSpace(p[0]) {
		return nil
	}
	return p
}

// isPrint is C's isprint in the "C" locale.
func isPrint(b byte) bool { return b >= 0x20 && b <= 0x7E }

// isSpace is C's isspace in the "C" locale.
func isSpace(b byte) bool { return b == ' ' || (b >= '\t' && b <= '\r') }

// MaxTokenLength returns the max_token_length recorded in the file header,
// an upper bound on the byte length of every token string.
func (t *Tokenizer) MaxTokenLength() int { return t.maxLen }
