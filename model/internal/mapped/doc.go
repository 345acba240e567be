// Package mapped opens a file as one read-only byte slice: memory-mapped on
// Unix systems, so that the model readers hand out slices of the page cache
// and weights reach the device without a second host copy; read whole, bounded
// by the file's size as stat reports it, elsewhere. Source is what the GGUF
// and safetensors readers keep of it: bounded tensor slices, the mapping's
// lifetime and its residency hints, for a mapped file or for bytes given.
//
// Invariants: the slice is never written; it is valid until Close, and a
// slice of it must not be used after Close (on Unix the pages are unmapped),
// except a slice Retain kept, which stays mapped until its release (the
// last of Close and the releases unmaps). Drop is never called on the pages
// of a retained slice.
package mapped
