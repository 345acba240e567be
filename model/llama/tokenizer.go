package llama

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/model/llama2c"
)

// ggufTokenizer makes the llama2.c tokenizer of a GGUF file's
// SentencePiece vocabulary (tokenizer.ggml.model "llama" with the Llama 2
// layout: <unk>, <s>, </s>, then the 256 byte tokens). llama2.c's encoder
// is that vocabulary's BPE by scores with byte fallback, so this serves
// files like stories260K.gguf exactly. Other vocabularies need the
// tokenizer package (the tokenizer issue) and get an error naming what the
// file holds.
func ggufTokenizer(f *gguf.File) (*llama2c.Tokenizer, error) {
	model, err := f.String("tokenizer.ggml.model")
	if err != nil {
		return nil, fmt.Errorf("llama: tokenizer: %w", err)
	}
	toks, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return nil, fmt.Errorf("llama: tokenizer: %w", err)
	}
	scores, err := f.Float32s("tokenizer.ggml.scores")
	if model != "llama" || err != nil || len(scores) != len(toks) || len(toks) < 259 || toks[1] != "<s>" || toks[2] != "</s>" {
		return nil, fmt.Errorf("llama: %s: tokenizer.ggml.model %q: %w: this vocabulary needs the tokenizer package (pass a llama2.c --tokenizer meanwhile)", f.Path, model, ErrNotImplemented)
	}
	for b := range 256 {
		if toks[3+b] != fmt.Sprintf("<0x%02X>", b) {
			return nil, fmt.Errorf("llama: %s: tokenizer.ggml.tokens[%d] is %q, not the byte token <0x%02X>: %w: this vocabulary needs the tokenizer package", f.Path, 3+b, toks[3+b], b, ErrNotImplemented)
		}
	}
	// llama2.c's file: int32 max_token_length, then per token a float32
	// score, an int32 length and the piece, with spaces for "▁".
	var buf []byte
	le := binary.LittleEndian
	maxLen := 0
	pieces := make([]string, len(toks))
	for i, t := range toks {
		pieces[i] = strings.ReplaceAll(t, "▁", " ")
		maxLen = max(maxLen, len(pieces[i]))
	}
	buf = le.AppendUint32(buf, uint32(maxLen))
	for i, p := range pieces {
		buf = le.AppendUint32(buf, math.Float32bits(scores[i]))
		buf = le.AppendUint32(buf, uint32(len(p)))
		buf = append(buf, p...)
	}
	tok, err := llama2c.ReadTokenizer(buf, len(toks))
	if err != nil {
		return nil, fmt.Errorf("llama: %s: tokenizer: %w", f.Path, err)
	}
	return tok, nil
}
