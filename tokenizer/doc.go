// Package tokenizer turns text into a model's token ids and back, for the
// vocabularies real models ship: Hugging Face tokenizer.json files (BPE with
// merges, byte-level BPE, byte fallback, the normalizers, pre-tokenizers and
// decoders those files use, added and special tokens), and GGUF vocabularies
// (SentencePiece-style "llama" and BPE "gpt2", with the pre-tokenizer
// llama.cpp picks for tokenizer.ggml.pre), given as plain data (Vocab) so
// that this package reads no model file itself.
//
// Every Tokenizer is read-only after construction and safe for concurrent
// use. Invariants:
//
//   - Encoding is O(n log n) in the text: merges go through a heap over
//     candidate pairs, pre-tokenizers are linear scanners, and added tokens
//     are found with a trie walk bounded by the longest added token.
//   - Decoding is per token (Piece), so a stream decodes each token once;
//     StreamDecoder holds bytes back only while a UTF-8 sequence is
//     incomplete, and never takes text back.
//   - MaxBytesPerToken bounds how many bytes of text one token can stand for,
//     so a caller can refuse a text that cannot fit a context before
//     encoding it.
//   - A file this package cannot honour exactly (an unknown model,
//     normalizer, pre-tokenizer or decoder, a merge naming an unknown token)
//     is an error naming the file and the field, never a silent
//     approximation.
package tokenizer
