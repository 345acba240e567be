// Package safetensors reads Hugging Face's safetensors files and sharded
// checkpoints: an 8-byte little-endian header length, a JSON header naming
// each tensor's dtype, shape and byte range, then the data, which stays in
// the file's memory mapping.
//
// A directory's model is model.safetensors, or the shards that
// model.safetensors.index.json's weight_map names; OpenDir reads either and
// serves every tensor by name.
//
// Invariants:
//   - Reading is bounded: the header length is checked against the file's
//     size (and a 100 MiB cap, as the reference implementation has) before
//     it is read, every shape and byte range against the data section;
//     nothing allocates more than the header's own size justifies.
//   - Every error about the content wraps ErrMalformed and names the file and
//     the tensor or field at fault; nothing panics on any input (a fuzz
//     target checks this). Duplicate tensor names are refused.
//   - A File is read-only after Open and safe for concurrent use; tensor
//     bytes are slices of the mapping, valid until Close.
package safetensors
