package stories260k

import (
	"embed"
	"strings"
)

//go:embed stories260K.bin
var checkpoint []byte

//go:embed tok512.bin
var tokenizer []byte

// Checkpoint returns the llama2.c "version 0" checkpoint bytes. The slice is
// shared: callers must not modify it.
func Checkpoint() []byte { return checkpoint }

// Tokenizer returns the llama2.c tokenizer bytes. The slice is shared: callers
// must not modify it.
func Tokenizer() []byte { return tokenizer }

//go:embed testdata/*.txt
var references embed.FS

// Reference returns what the reference C implementation printed for prompt
// (greedy, 256 positions): the prompt's pieces, the continuation, and a
// newline. ok is false for a prompt without a recorded reference; the
// recorded ones are "Once upon a time" and "The little dog".
func Reference(prompt string) (text string, ok bool) {
	b, err := references.ReadFile("testdata/" + strings.ReplaceAll(prompt, " ", "_") + ".txt")
	if err != nil {
		return "", false
	}
	return string(b), true
}

// ReferenceSteps is the number of positions the references were made with.
const ReferenceSteps = 256

// Printed is what the reference program prints for a prompt's tokens and
// their generated continuation, as Reference holds it: each prompt piece
// after the first token (BOS), then each generated piece, then a newline.
// piece decodes a token after the one before it (a tokenizer's SafePiece).
func Printed(piece func(prev, id int) []byte, prompt []int, generated []int32) string {
	var out []byte
	for i := 1; i < len(prompt); i++ {
		out = append(out, piece(prompt[i-1], prompt[i])...)
	}
	prev := -1
	if len(prompt) > 0 {
		prev = prompt[len(prompt)-1]
	}
	for _, g := range generated {
		out = append(out, piece(prev, int(g))...)
		prev = int(g)
	}
	return string(out) + "\n"
}
