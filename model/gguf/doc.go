// Package gguf reads GGUF files, the model format of llama.cpp and ggml
// (versions 2 and 3, little-endian): the header, the typed metadata
// key/values (arrays included), the tensor infos, the alignment and the
// tensor data, which stays in the file's memory mapping.
//
// The format, as ggml's gguf.cpp and docs/gguf.md in the ggml repository
// define it:
//
//	magic "GGUF", uint32 version, uint64 tensor count, uint64 metadata count
//	metadata: string key, uint32 value type, value
//	  (string = uint64 length + bytes; array = uint32 element type, uint64
//	  count, elements)
//	tensor infos: string name, uint32 n_dims, uint64 ne[n_dims] (ne[0] the
//	  contiguous axis), uint32 ggml type, uint64 offset from the data start
//	padding to general.alignment (default 32), then the tensor data
//
// Invariants:
//   - Reading is bounded: every count, string length and array length is
//     checked against the bytes left in the file before anything is
//     allocated, so a file never makes the reader allocate more than a small
//     multiple of its own size; tensors must lie inside the file.
//   - Every error about the content wraps ErrMalformed and names the file
//     and the field or tensor at fault; nothing panics on any input (a fuzz
//     target checks this).
//   - A File is read-only after Open and safe for concurrent use; tensor
//     bytes are slices of the mapping, valid until Close.
package gguf
