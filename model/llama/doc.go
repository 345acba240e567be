// Package llama is a Llama-family decoder written on accel kernels: token
// embedding, RMSNorm, grouped-query attention with RoPE over a paged KV cache,
// a SwiGLU MLP, and sampling on the device. It implements engine.Model: it
// declares its walks (prefill, packed; decode, batched) and their graph
// configs, builds a step's inputs, and enqueues its forward. It never
// captures, allocates resource state or picks batches: models declare, the
// engine executes.
//
// Weights come from a llama2.c checkpoint (package llama2c), the embedded
// stories260K by default, or from Synthetic, named configurations with seeded
// random weights for benchmarks. Matrices may be stored as bf16 (Options),
// widened to float32 in the kernels; float32 is the default.
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
