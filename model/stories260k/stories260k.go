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
