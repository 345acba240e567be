package mapped

import "fmt"

// Source is the bytes a model reader's parsed file hands tensors out of:
// a mapped file's (OpenWith) or bytes its caller holds (Given). It is what
// the GGUF and safetensors readers share: every slice is bounded by the
// bytes, Close ends the mapping's lifetime and Retain outlives it, and
// Drop lets tensor pages leave resident memory. A Source of given bytes
// has nothing to release: Close and Drop do nothing (its bytes stay
// readable), and Retain refuses.
type Source struct {
	data []byte
	m    *File
}

// Given is a Source of b, which the caller keeps alive.
func Given(b []byte) Source { return Source{data: b} }

// OpenWith maps the file at path and parses it with parse, which is given
// the file's Source to keep (and Close) in what it returns. An error mapping
// the file is wrapped as "prefix: err"; a parse error is returned as parse
// gave it, and the mapping released.
func OpenWith[T any](path, prefix string, parse func(name string, src Source) (T, error)) (T, error) {
	var zero T
	m, err := Open(path)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", prefix, err)
	}
	v, err := parse(path, Source{data: m.Data, m: m})
	if err != nil {
		m.Close()
		return zero, err
	}
	return v, nil
}

// Data is all the bytes; nil once closed. The caller must not modify them.
func (s *Source) Data() []byte { return s.data }

// Closed reports whether a mapping's Source was closed (or the Source
// holds nothing).
func (s *Source) Closed() bool { return s.data == nil }

// Slice is size bytes from off, with its capacity cut to them, or nil when
// they do not lie inside the bytes (or the Source is closed): a tensor's
// bytes, valid until Close.
func (s *Source) Slice(off, size int64) []byte {
	if off < 0 || size < 0 || off > int64(len(s.data)) || size > int64(len(s.data))-off {
		return nil
	}
	return s.data[off : off+size : off+size]
}

// Close releases the mapping (see File.Close); slices of it must not be
// used afterwards, but for those Retain keeps. Given bytes stay as they are.
func (s *Source) Close() error {
	if s.m == nil {
		return nil
	}
	err := s.m.Close()
	s.m, s.data = nil, nil
	return err
}

// Retain keeps b, bytes from Slice, valid past Close until release is
// called, with its pages read in now (see File.Retain). ok is false for a
// closed Source, given bytes, or bytes that are not the file's.
func (s *Source) Retain(b []byte) (release func(), ok bool) {
	if s.m == nil {
		return nil, false
	}
	return s.m.Retain(b)
}

// Drop lets the pages under b, bytes from Slice, leave this process's
// resident memory (see File.Drop). The bytes stay readable.
func (s *Source) Drop(b []byte) {
	if s.m != nil {
		s.m.Drop(b)
	}
}
