package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/reprise-ml/reprise/internal/bounded"

	"github.com/reprise-ml/reprise/model/internal/mapped"
)

// MaxHeader bounds the JSON header (the reference implementation's limit).
const MaxHeader = 100 << 20

// ErrMalformed is wrapped by every error about a file's content.
var ErrMalformed = errors.New("safetensors: malformed file")

// ErrNotFound is wrapped by the error for an absent tensor.
var ErrNotFound = errors.New("safetensors: not found")

// Error is an error about one field or tensor of one file.
type Error struct {
	File, Field, Msg string
	kind             error
}

func (e *Error) Error() string { return "safetensors: " + e.File + ": " + e.Field + ": " + e.Msg }
func (e *Error) Unwrap() error { return e.kind }

func fail(file, field, format string, args ...any) error {
	return &Error{File: file, Field: field, Msg: fmt.Sprintf(format, args...), kind: ErrMalformed}
}

// DType is a tensor's element type, as the header spells it.
type DType string

// The dtypes of the format.
const (
	F64  DType = "F64"
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
	I16  DType = "I16"
	I8   DType = "I8"
	U8   DType = "U8"
	U16  DType = "U16"
	U32  DType = "U32"
	U64  DType = "U64"
	Bool DType = "BOOL"
	F8E4 DType = "F8_E4M3"
	F8E5 DType = "F8_E5M2"
)

var sizes = map[DType]int64{F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, U16: 2, U32: 4, U64: 8, Bool: 1, F8E4: 1, F8E5: 1}

// Size is the dtype's bytes per element (0 if unknown).
func (d DType) Size() int64 { return sizes[d] }

// Tensor describes one tensor.
type Tensor struct {
	Name  string
	DType DType
	// Shape is row-major, outermost first (PyTorch's order).
	Shape []int64
	// Offset is the first byte in the file, Size the bytes.
	Offset, Size int64
}

// Elements is the product of the shape.
func (t Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is a parsed safetensors file.
type File struct {
	Path     string
	Metadata map[string]string
	Tensors  []Tensor // sorted by offset
	byName   map[string]int
	src      mapped.Source
}

// Open maps and parses a file. Close releases the mapping.
func Open(path string) (*File, error) { return mapped.OpenWith(path, "safetensors", parse) }

// Close releases the mapping; tensor data from it must not be used
// afterwards. A File from Parse has nothing to release.
func (f *File) Close() error { return f.src.Close() }

type entry struct {
	DType       DType    `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// Parse parses a file held in data; name labels errors. The File's tensor
// data are slices of data.
func Parse(name string, data []byte) (*File, error) { return parse(name, mapped.Given(data)) }

// parse parses the file in src, which the File keeps.
func parse(name string, src mapped.Source) (*File, error) {
	data := src.Data()
	if len(data) < 8 {
		return nil, fail(name, "header length", "truncated: the file has %d bytes, the header length alone needs 8", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeader {
		return nil, fail(name, "header length", "%d bytes, more than the %d a header may have", n, MaxHeader)
	}
	if n > uint64(len(data)-8) {
		return nil, fail(name, "header length", "%d bytes, but the file has only %d after the length", n, len(data)-8)
	}
	hdr := data[8 : 8+n]
	start := int64(8 + n)
	f := &File{Path: name, src: src, byName: map[string]int{}}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fail(name, "header", "not a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fail(name, "header", "bad JSON: %v", err)
		}
		key, _ := tok.(string)
		if key == "__metadata__" {
			if f.Metadata != nil {
				return nil, fail(name, "__metadata__", "appears twice")
			}
			f.Metadata = map[string]string{}
			if err := dec.Decode(&f.Metadata); err != nil {
				return nil, fail(name, "__metadata__", "want an object of strings: %v", err)
			}
			continue
		}
		field := fmt.Sprintf("tensor %q", key)
		if _, dup := f.byName[key]; dup {
			return nil, fail(name, field, "appears twice in the header")
		}
		var e entry
		if err := dec.Decode(&e); err != nil {
			return nil, fail(name, field, "bad entry: %v", err)
		}
		t, err := e.tensor(name, field, key, int64(len(data))-start)
		if err != nil {
			return nil, err
		}
		t.Offset += start
		f.byName[key] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fail(name, "header", "bad JSON: %v", err)
	}
	if dec.More() {
		return nil, fail(name, "header", "trailing data after the JSON object")
	}
	sort.Slice(f.Tensors, func(i, j int) bool { return f.Tensors[i].Offset < f.Tensors[j].Offset })
	for i, t := range f.Tensors {
		f.byName[t.Name] = i
		if i > 0 {
			if p := f.Tensors[i-1]; p.Offset+p.Size > t.Offset {
				return nil, fail(name, fmt.Sprintf("tensor %q", t.Name), "its bytes overlap tensor %q's", p.Name)
			}
		}
	}
	return f, nil
}

func (e entry) tensor(file, field, name string, dataLen int64) (Tensor, error) {
	sz := e.DType.Size()
	if sz == 0 {
		return Tensor{}, fail(file, field, "unknown dtype %q", e.DType)
	}
	if len(e.Shape) > 8 {
		return Tensor{}, fail(file, field, "%d dimensions", len(e.Shape))
	}
	elems := int64(1)
	for _, d := range e.Shape {
		if d < 0 || (d > 0 && elems > math.MaxInt64/d) {
			return Tensor{}, fail(file, field, "bad shape %v", e.Shape)
		}
		elems *= d
	}
	lo, hi := e.DataOffsets[0], e.DataOffsets[1]
	if lo < 0 || hi < lo {
		return Tensor{}, fail(file, field, "bad data_offsets %v", e.DataOffsets)
	}
	if hi > dataLen {
		return Tensor{}, fail(file, field, "data_offsets %v lie beyond the end of the file (the data section holds %d bytes)", e.DataOffsets, dataLen)
	}
	if elems > math.MaxInt64/sz || elems*sz != hi-lo {
		return Tensor{}, fail(file, field, "%s %v needs %d bytes, data_offsets %v hold %d", e.DType, e.Shape, elems*sz, e.DataOffsets, hi-lo)
	}
	return Tensor{Name: name, DType: e.DType, Shape: append([]int64{}, e.Shape...), Offset: lo, Size: hi - lo}, nil
}

// Tensor returns a tensor's info.
func (f *File) Tensor(name string) (Tensor, bool) {
	i, ok := f.byName[name]
	if !ok {
		return Tensor{}, false
	}
	return f.Tensors[i], true
}

// Data returns a tensor's bytes, a slice of the mapping valid until Close.
func (f *File) Data(t Tensor) []byte { return f.src.Slice(t.Offset, t.Size) }

// Retain keeps b, tensor bytes from Data, valid past Close until release
// is called, with its pages read in now, for a device that reads them in
// place (see mapped.File.Retain). ok is false for a closed file, one from
// Parse, or bytes that are not the file's.
func (f *File) Retain(b []byte) (release func(), ok bool) { return f.src.Retain(b) }

// Drop lets a tensor's pages leave resident memory (see mapped.File.Drop).
func (f *File) Drop(t Tensor) { f.src.Drop(f.Data(t)) }

// IndexName is the name of a sharded checkpoint's index.
const IndexName = "model.safetensors.index.json"

// SingleName is the name of an unsharded checkpoint.
const SingleName = "model.safetensors"

// Model is a directory's tensors, across its shards.
type Model struct {
	Dir    string
	Files  []*File
	where  map[string]int // tensor name -> file
	sorted []string
}

// OpenDir opens dir's model.safetensors, or the shards its
// model.safetensors.index.json names (every tensor the index maps must be
// in its shard; a shard may not name a path outside dir).
func OpenDir(dir string) (*Model, error) {
	m := &Model{Dir: dir, where: map[string]int{}}
	idxPath := filepath.Join(dir, IndexName)
	if _, err := os.Stat(idxPath); err == nil {
		raw, err := bounded.ReadFile(idxPath, MaxHeader)
		if errors.Is(err, bounded.ErrTooLarge) {
			return nil, fail(idxPath, "index", "more than %d bytes", MaxHeader)
		}
		if errors.Is(err, bounded.ErrNotRegular) {
			return nil, fail(idxPath, "index", "not a regular file")
		}
		if err != nil {
			return nil, fmt.Errorf("safetensors: %w", err)
		}
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(raw, &idx); err != nil {
			return nil, fail(idxPath, "index", "bad JSON: %v", err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, fail(idxPath, "weight_map", "empty or missing")
		}
		shard := map[string]int{}
		names := slices.Sorted(maps.Keys(idx.WeightMap))
		for _, n := range names {
			s := idx.WeightMap[n]
			if s == "" || s != filepath.Base(s) || strings.HasPrefix(s, ".") {
				m.Close()
				return nil, fail(idxPath, fmt.Sprintf("weight_map %q", n), "shard %q is not a file name in the directory", s)
			}
			i, ok := shard[s]
			if !ok {
				f, err := Open(filepath.Join(dir, s))
				if err != nil {
					m.Close()
					return nil, fmt.Errorf("safetensors: %s: shard %q (weight_map %q): %w", idxPath, s, n, err)
				}
				i = len(m.Files)
				shard[s] = i
				m.Files = append(m.Files, f)
			}
			if _, ok := m.Files[i].Tensor(n); !ok {
				m.Close()
				return nil, &Error{File: idxPath, Field: fmt.Sprintf("weight_map %q", n), Msg: fmt.Sprintf("shard %s has no such tensor", s), kind: ErrMalformed}
			}
			m.where[n] = i
		}
		m.sorted = names
		return m, nil
	}
	f, err := Open(filepath.Join(dir, SingleName))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("safetensors: %s: %w: no %s and no %s", dir, ErrNotFound, SingleName, IndexName)
		}
		return nil, err
	}
	m.Files = []*File{f}
	for _, t := range f.Tensors {
		m.where[t.Name] = 0
		m.sorted = append(m.sorted, t.Name)
	}
	sort.Strings(m.sorted)
	return m, nil
}

// Names lists the tensors, sorted.
func (m *Model) Names() []string { return m.sorted }

// Tensor returns a tensor, the file holding it and its bytes.
func (m *Model) Tensor(name string) (Tensor, *File, bool) {
	i, ok := m.where[name]
	if !ok {
		return Tensor{}, nil, false
	}
	t, _ := m.Files[i].Tensor(name)
	return t, m.Files[i], true
}

// Close closes every shard.
func (m *Model) Close() error {
	var err error
	for _, f := range m.Files {
		err = errors.Join(err, f.Close())
	}
	m.Files = nil
	return err
}
