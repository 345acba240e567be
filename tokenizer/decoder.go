package tokenizer

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"unicode/utf8"
)

// decodeStep is one decoder of a chain, applied to one token's bytes. first
// is set for the first token of a text.
type decodeStep interface {
	apply(b []byte, first bool) []byte
}

// byteLevelDec maps byte-level characters back to their bytes: a token
// with a character outside the alphabet (an added token such as "日本")
// stays its own UTF-8 as a whole, as Hugging Face's ByteLevel decoder
// keeps it.
type byteLevelDec struct{}

func (byteLevelDec) apply(b []byte, _ bool) []byte {
	for _, r := range string(b) {
		if _, ok := charByte[r]; !ok {
			return b
		}
	}
	return appendFromByteLevel(nil, string(b))
}

// byteFallbackDec turns a <0xXX> token into its byte.
type byteFallbackDec struct{}

func (byteFallbackDec) apply(b []byte, _ bool) []byte {
	if c, ok := ByteToken(b); ok {
		return []byte{c}
	}
	return b
}

// ByteToken reports the byte a token of exactly the form <0xHH> (hex
// digits of either case) stands for: SentencePiece's byte fallback, as
// GGUF vocabularies, tokenizer.json files and llama2.c's tokenizer spell it.
func ByteToken(p []byte) (byte, bool) {
	if len(p) != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>' {
		return 0, false
	}
	var b [1]byte
	_, err := hex.Decode(b[:], p[3:5])
	return b[0], err == nil
}

type replaceDec struct{ old, new []byte }

func (r replaceDec) apply(b []byte, _ bool) []byte { return bytes.ReplaceAll(b, r.old, r.new) }

// metaspaceDec turns the replacement character back into spaces. In a
// text's first token it drops them instead, every one and not only a
// leading one, when the encoder prepends one: that is what Hugging Face's
// Metaspace decoder does (decoders/metaspace.rs), so "▁▁" first decodes to
// nothing.
type metaspaceDec struct {
	replacement []byte
	prepended   bool
}

func (m metaspaceDec) apply(b []byte, first bool) []byte {
	if first && m.prepended {
		return bytes.ReplaceAll(b, m.replacement, nil)
	}
	return bytes.ReplaceAll(b, m.replacement, []byte(" "))
}

// stripDec removes up to start leading and stop trailing copies of
// content; after a Fuse only the text's first token is stripped at its
// start (onlyFirst).
type stripDec struct {
	content     []byte
	start, stop int
	onlyFirst   bool
}

func (s stripDec) apply(b []byte, first bool) []byte {
	if !s.onlyFirst || first {
		for i := 0; i < s.start && bytes.HasPrefix(b, s.content); i++ {
			b = b[len(s.content):]
		}
	}
	for i := 0; i < s.stop && bytes.HasSuffix(b, s.content); i++ {
		b = b[:len(b)-len(s.content)]
	}
	return b
}

// decoder is a chain of steps applied token by token. Fuse (joining the
// tokens) changes nothing for a per-token decode, but a Strip after it
// applies to the text's start only; steps that would need to see across
// tokens after a Fuse are refused when the chain is built.
type decoder []decodeStep

func (d decoder) piece(tok string, first bool) []byte {
	b := []byte(tok)
	for _, s := range d {
		b = s.apply(b, first)
	}
	return b
}

// checkAfterFuse refuses a step that a per-token decode cannot do after a
// Fuse.
func checkAfterFuse(kind string, s decodeStep) error {
	switch v := s.(type) {
	case stripDec:
		if v.stop > 0 {
			return fmt.Errorf("a Strip decoder with stop > 0 after Fuse is not supported")
		}
	case replaceDec:
		if len([]rune(string(v.old))) > 1 {
			return fmt.Errorf("a Replace decoder of more than one character after Fuse is not supported")
		}
	}
	_ = kind
	return nil
}

func lastRune(s string) (rune, int) {
	return utf8.DecodeLastRuneInString(s)
}
