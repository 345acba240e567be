// Package llama2c reads the file formats of Andrej Karpathy's llama2.c project
// and holds a deliberately simple reference forward pass used as a test oracle.
//
// It provides:
//   - ReadCheckpoint, LoadCheckpoint and WriteCheckpoint for the llama2.c
//     "version 0" checkpoint: a little-endian header of 7 int32 (dim,
//     hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a
//     negative vocab_size means the classifier is not shared with the token
//     embedding) followed by float32 weight arrays (see Checkpoint).
//   - ReadTokenizer and LoadTokenizer for the tokenizer file (int32
//     max_token_length, then per token a float32 score, an int32 byte length
//     and the bytes), with Encode, Piece and SafePiece behaving exactly like
//     the encode, decode and safe_printf functions of llama2.c's run.c.
//   - Reference and Generate: a straightforward float32 Llama forward pass and
//     the greedy generation loop of run.c, written so that every float32
//     operation happens in the same order and with the same rounding as the
//     plain C program. Generate's output is byte-identical with the reference
//     program's stdout at temperature 0 (tested for stories260K).
//
// Invariants:
//   - Every error caused by malformed input data (bad header values, truncated
//     or over-long files, bad token lengths) wraps ErrMalformed, so
//     errors.Is(err, ErrMalformed) identifies it; the message says what is
//     wrong and where.
//   - Readers copy what they keep: a Checkpoint or Tokenizer never aliases the
//     byte slice it was read from, so the input may be shared or reused.
//   - When Config.SharedClassifier is true, Checkpoint.Classifier is the very
//     same slice as Checkpoint.TokenEmbedding, and Params counts it once.
//   - The reference arithmetic is float32 throughout, evaluated sequentially,
//     with every product explicitly rounded to float32 before it is added, so
//     the Go compiler cannot fuse a multiply-add on any architecture (it
//     would on arm64, or on amd64 with GOAMD64=v3, without the explicit
//     conversions). Transcendental functions (sqrt, pow, exp, sin, cos) are
//     computed in float64 and rounded to float32: this reproduces C's sqrtf
//     exactly (it is correctly rounded) and a correctly rounded powf, expf,
//     sinf and cosf. Against a run.c linked with such a libm the logits are
//     bit-identical. glibc's expf, sinf and cosf are not correctly rounded
//     for a small fraction of inputs (measured with glibc 2.36 on x86-64:
//     about 1 input in 13000 for expf, 1 in 650 for sinf, 1 in 1000 for
//     cosf), so against a glibc build the logits differ in their last bits
//     (at most about 1e-6 relative on stories260K) while the greedy text
//     stays identical.
//   - The package uses only the standard library and no cgo; a Reference is
//     not safe for concurrent use, everything else is read-only after
//     construction and safe to share between goroutines.
package llama2c
