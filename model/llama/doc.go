// Package llama is a Llama-family decoder written on accel kernels: token
// embedding, RMSNorm, grouped-query attention with RoPE over a paged KV cache,
// a SwiGLU MLP, and sampling on the device. It implements engine.Model: it
// declares its walks (prefill, packed; decode, batched) and their graph
// configs, builds a step's inputs, and enqueues its forward. It never
// captures, allocates resource state or picks batches: models declare, the
// engine executes.
//
// A model is built from an architecture-neutral Config and a Weights source
// that gives each tensor by role with its type and bytes: llama2.c
// checkpoints (package llama2c; the embedded stories260K by default), GGUF
// files (package gguf; architectures llama, qwen2, qwen3), Hugging Face
// directories (package safetensors; Llama, Mistral, Qwen2, Qwen3), and
// Synthetic, named configurations with seeded random weights for benchmarks.
// Detect tells the formats apart by content. Tensors are converted once
// from the file's mapping (dequantised with package quant, permuted from
// rotate-half into interleaved pairs where the file stores them so) through
// bounded staging buffers into the Options' storage: float32 (default) or
// bf16, widened to float32 in the kernels.
//
// A Config field the forward does not implement yet (rope scaling, q/k/v
// biases, q/k norms) is refused by Config.Check naming it; a file field
// that may change the maths and that the loader does not know is refused
// the same way, never ignored.
//
// The architecture's maths beyond Llama 2 (Llama 3 rope scaling, Qwen2's
// q/k/v biases, Qwen3's per-head q/k norms, head_dim apart from dim/heads)
// runs where the Config and the weights declare it; model/llama/reference
// is its float64 oracle.
//
// Invariant: on the CPU device the forward reproduces the llama2.c reference
// arithmetic, so greedy generation matches it byte for byte, and a row's
// result never depends on the other rows of its batch.
package llama
