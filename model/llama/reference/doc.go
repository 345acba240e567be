// Package reference is a deliberately plain float64 forward pass of the
// Llama-family decoders reprise runs (Llama 2 and 3.x, Mistral, Qwen2,
// Qwen3), one sequence at a time, used as a test oracle for model/llama on
// the architecture features no model file in the repository exercises:
// Llama 3 rope scaling, rope_theta, q/k/v biases, per-head q/k RMSNorm,
// head_dim different from hidden/heads, grouped-query attention and tied
// embeddings.
//
// It is written from the published definitions, not from reprise's kernels:
// Hugging Face transformers' modeling_llama.py, modeling_qwen2.py and
// modeling_qwen3.py (LlamaRMSNorm, LlamaRotaryEmbedding, rotate_half,
// apply_rotary_pos_emb, eager_attention_forward, LlamaMLP, Qwen3Attention's
// q_norm/k_norm) and modeling_rope_utils.py (_compute_default_rope_parameters,
// _compute_llama3_parameters, itself Meta's apply_scaling in
// llama-models' model.py). Every sum is in float64, so its logits are the
// exact maths to within float64 rounding; a float32 implementation agrees
// with it to a tolerance, never bit for bit.
//
// A Reference is not safe for concurrent use.
//
// Invariant: the oracle shares no code with model/llama or the accel
// kernels; where both follow a formula, each is written from its source.
package reference
