package tokenizer

import (
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// Tokenizer is what a server and a command line need from a model's
// tokenizer.
type Tokenizer interface {
	// Encode returns the token ids of text. Special (control) tokens written
	// in the text are recognised as such. addSpecial adds what the model adds
	// around a whole input (BOS, for the vocabularies that want one).
	Encode(text string, addSpecial bool) []int
	// Piece returns the bytes token id decodes to when it follows the token
	// prev (prev < 0: id starts the text). The bytes of a text are the
	// concatenation of its tokens' pieces; a piece may end inside a UTF-8
	// sequence that the next token completes. It returns nil for an id out
	// of range. The result is the caller's.
	Piece(prev, id int) []byte
	// IsControl reports whether id is a control token (BOS, EOS, chat
	// markers): text for the model, not for a reader.
	IsControl(id int) bool
	// Special returns the model's special token ids.
	Special() Special
	// VocabSize is the number of token ids (every id is below it).
	VocabSize() int
	// MaxBytesPerToken bounds the bytes of input text one token can stand
	// for: Encode(text) has at least len(text)/MaxBytesPerToken tokens
	// (rounded up). 0 means there is no such bound (an added token that
	// strips the whitespace around it can stand for any amount of it).
	MaxBytesPerToken() int
}

// Special holds a vocabulary's special token ids; -1 where there is none.
type Special struct {
	BOS int
	// EOS lists every id that ends a generation: the EOS token and the
	// end-of-turn and other end-of-generation tokens the model declares (a
	// generation_config.json eos_token_id list, GGUF's eot and eom ids).
	EOS []int
	// EOT is the end-of-turn token of chat models (-1: none).
	EOT int
	// AddBOS and AddEOS say whether Encode with addSpecial adds them.
	AddBOS, AddEOS bool
}

// IsEOS reports whether id is one of s.EOS.
func (s Special) IsEOS(id int) bool { return slices.Contains(s.EOS, id) }

// ErrFormat is wrapped by every error about a malformed or unsupported
// tokenizer file or vocabulary.
var ErrFormat = errors.New("tokenizer: bad tokenizer data")

// Decode returns the text of ids: their pieces concatenated (control tokens
// left out when skipControl), with each byte that is not part of a valid
// UTF-8 sequence replaced by U+FFFD.
func Decode(t Tokenizer, ids []int, skipControl bool) string {
	var b []byte
	prev := -1
	for _, id := range ids {
		if skipControl && t.IsControl(id) {
			if prev < 0 && id == t.Special().BOS {
				// A skipped BOS still starts the text.
				continue
			}
			prev = id
			continue
		}
		b = append(b, t.Piece(prev, id)...)
		prev = id
	}
	return validUTF8(b)
}

// validUTF8 returns b as a string with every invalid byte replaced by
// U+FFFD.
func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return string(out)
}

// StreamDecoder turns generated tokens into text as they come: bytes that
// end inside a UTF-8 sequence are held until a later token completes it (or
// Flush gives up on it), so every string it returns is valid UTF-8 and no
// text is ever taken back.
type StreamDecoder struct {
	t           Tokenizer
	prev        int
	held        []byte
	skipControl bool
}

// NewStreamDecoder decodes tokens that follow prev (the last prompt token,
// or -1 when the text starts with the first token given). Control tokens
// are decoded to nothing when skipControl is set.
func NewStreamDecoder(t Tokenizer, prev int, skipControl bool) *StreamDecoder {
	return &StreamDecoder{t: t, prev: prev, skipControl: skipControl}
}

// Add decodes one more token and returns the text that is now complete
// (possibly empty).
func (d *StreamDecoder) Add(id int) string {
	if d.skipControl && d.t.IsControl(id) {
		if !(d.prev < 0 && id == d.t.Special().BOS) {
			d.prev = id
		}
		return ""
	}
	d.held = append(d.held, d.t.Piece(d.prev, id)...)
	d.prev = id
	n := completePrefix(d.held)
	out := validUTF8(d.held[:n])
	d.held = append(d.held[:0], d.held[n:]...)
	return out
}

// Flush returns what is held (an incomplete sequence, as U+FFFD per byte)
// and empties it: the end of a stream.
func (d *StreamDecoder) Flush() string {
	out := validUTF8(d.held)
	d.held = d.held[:0]
	return out
}

// completePrefix returns the length of b without a trailing incomplete (but
// so far valid) UTF-8 sequence.
func completePrefix(b []byte) int {
	// A sequence is at most 4 bytes: look at most 3 back for its lead byte.
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		c := b[i]
		if c < 0x80 {
			return len(b)
		}
		if c >= 0xC0 { // a lead byte
			need := 2
			switch {
			case c >= 0xF0:
				need = 4
			case c >= 0xE0:
				need = 3
			}
			if c >= 0xF8 || len(b)-i >= need {
				return len(b)
			}
			// Incomplete: hold it if what is there could still become valid.
			if utf8.FullRune(b[i:]) {
				return len(b) // invalid already: nothing to wait for
			}
			return i
		}
	}
	return len(b)
}

// CheckEmbedding refuses a tokenizer whose ids reach past the rows of the
// model's embedding (rows): such ids would index outside it. source names
// the model in the error.
func CheckEmbedding(t Tokenizer, rows int, source string) error {
	if n := t.VocabSize(); n > rows {
		return fmt.Errorf("tokenizer: %s: the vocabulary has %d tokens, more than the %d rows of the model's embedding: %w", source, n, rows, ErrFormat)
	}
	return nil
}
