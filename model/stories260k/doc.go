// Package stories260k embeds the default model: stories260K, a 260K-parameter
// Llama-architecture model trained on TinyStories, and its 512-token vocabulary,
// from the tinyllamas collection of the llama2.c project (MIT licence, see LICENSE).
//
// testdata/ holds the greedy outputs of the reference C implementation for two
// prompts (256 positions, temperature 0); the engine's tests compare with them
// byte for byte.
package stories260k
