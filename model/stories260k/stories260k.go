// Package stories260k embeds the default model: stories260K, a 260K-parameter
// Llama-architecture model trained on TinyStories, and its 512-token vocabulary,
// from the tinyllamas collection of the llama2.c project (MIT licence, see LICENSE).
//
// testdata/ holds the greedy outputs of the reference C implementation for two
// prompts (256 positions, temperature 0); the engine's tests compare with them
// byte for byte.
package stories260k

import _ "embed"

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
