// Package quant holds ggml's tensor types (the ones GGUF files store) and
// their block formats: sizes, dequantisation exactly as ggml defines it, and
// quantization with ggml's own reference algorithms (no importance matrix),
// so that a tensor quantized here has the bytes llama.cpp's llama-quantize
// writes for it.
//
// Invariants:
//   - A Type's numeric value is ggml's (GGUF stores it); Type.String is
//     ggml's name.
//   - A row of n elements of type t occupies RowBytes(t, n) bytes: n must be
//     a whole number of blocks, or it is an error, never a truncation.
//   - Dequantize rounds every float32 operation the way ggml's C reference
//     does when it is compiled without fused multiply-adds (each product
//     rounded to float32 before its add), and converts f16 scales exactly.
//   - Quantize is deterministic and reproduces ggml's quantize_row_*_ref,
//     branch for branch and rounding for rounding.
package quant
