package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"

	"github.com/reprise-ml/reprise/model/internal/mapped"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// KeyAlignment is the metadata key that sets the data alignment.
const KeyAlignment = "general.alignment"

const (
	// maxDims is GGML_MAX_DIMS: a tensor has at most four axes.
	maxDims = 4
	// maxDepth bounds arrays of arrays (the format allows nesting; no
	// model file nests more than once).
	maxDepth = 8
)

// ErrMalformed is wrapped by every error about a file's content; test with
// errors.Is.
var ErrMalformed = errors.New("gguf: malformed file")

// ErrNotFound is wrapped by the accessors' error for an absent key or tensor.
var ErrNotFound = errors.New("gguf: not found")

// Error is an error about one field or tensor of one file. It unwraps to
// ErrMalformed (or ErrNotFound for an absent key or tensor).
type Error struct {
	File  string // the file's path (or the name given to Parse)
	Field string // the header field, metadata key or tensor at fault
	Msg   string
	kind  error
}

func (e *Error) Error() string {
	return "gguf: " + e.File + ": " + e.Field + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.kind }

// Value is one metadata value.
type Value struct {
	typ  ValueType
	elem ValueType // arrays: the element type
	v    any       // uint8..float64, bool, string; arrays: a typed slice ([]uint8, ..., []string, []Value)
}

// Type is the value's type.
func (v Value) Type() ValueType { return v.typ }

// Elem is an array's element type.
func (v Value) Elem() ValueType { return v.elem }

// Len is an array's length (0 for a scalar).
func (v Value) Len() int {
	if v.typ != TypeArray {
		return 0
	}
	switch a := v.v.(type) {
	case []uint8:
		return len(a)
	case []int8:
		return len(a)
	case []uint16:
		return len(a)
	case []int16:
		return len(a)
	case []uint32:
		return len(a)
	case []int32:
		return len(a)
	case []float32:
		return len(a)
	case []bool:
		return len(a)
	case []string:
		return len(a)
	case []uint64:
		return len(a)
	case []int64:
		return len(a)
	case []float64:
		return len(a)
	case []Value:
		return len(a)
	}
	return 0
}

// Any is the value as Go holds it: uint8 .. float64, bool or string for a
// scalar, the typed slice for an array ([]Value for arrays of arrays). The
// caller must not modify a slice.
func (v Value) Any() any { return v.v }

// String formats the value briefly: scalars in full (strings quoted, cut at
// 60 bytes), arrays as their type and length.
func (v Value) String() string {
	switch x := v.v.(type) {
	case string:
		if len(x) > 60 {
			return fmt.Sprintf("%q... (%d bytes)", x[:60], len(x))
		}
		return fmt.Sprintf("%q", x)
	}
	if v.typ == TypeArray {
		return fmt.Sprintf("[%d]%s", v.Len(), v.elem)
	}
	return fmt.Sprint(v.v)
}

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// Tensor describes one tensor of the file.
type Tensor struct {
	Name string
	Type GGMLType
	// Shape is ggml's ne as the file stores it: Shape[0] is the contiguous
	// axis (a matrix of rows × cols is [cols, rows]).
	Shape []int64
	// Offset is the tensor's first byte in the file (the data start plus
	// the file's relative offset).
	Offset int64
	// Size is the tensor's bytes.
	Size int64
}

// Elements is the product of the shape.
func (t Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is a parsed GGUF file.
type File struct {
	Path       string
	Version    uint32
	Alignment  int64
	DataOffset int64 // where the tensor data starts
	Size       int64 // the file's bytes
	KVs        []KV  // the metadata in file order
	Tensors    []Tensor

	kv      map[string]int
	tensors map[string]int
	src     mapped.Source
}

// Open maps and parses the file at path. Close releases the mapping.
func Open(path string) (*File, error) { return mapped.OpenWith(path, "gguf", parse) }

// Close releases the file's mapping; tensor data from it must not be used
// afterwards. A File from Parse has nothing to release.
func (f *File) Close() error { return f.src.Close() }

// IsGGUF reports whether data starts with the GGUF magic.
func IsGGUF(data []byte) bool { return len(data) >= 4 && string(data[:4]) == Magic }

// Parse parses a GGUF file held in data; name labels errors. The File's
// tensor data are slices of data.
func Parse(name string, data []byte) (*File, error) { return parse(name, mapped.Given(data)) }

// parse parses the file in src, which the File keeps.
func parse(name string, src mapped.Source) (*File, error) {
	data := src.Data()
	d := &decoder{file: name, data: data}
	f := &File{Path: name, Size: int64(len(data)), src: src, kv: map[string]int{}, tensors: map[string]int{}}
	if len(data) < 4 || string(data[:4]) != Magic {
		n := min(len(data), 4)
		return nil, d.errf("magic", "not a GGUF file: starts with %q, want %q", data[:n], Magic)
	}
	d.off = 4
	v, err := d.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case v == 2 || v == 3:
	case v == 1:
		return nil, d.errf("version", "GGUF version 1 is not supported (versions 2 and 3 are): convert the file again with a current llama.cpp")
	case v&0xFFFF == 0 && bits.ReverseBytes32(v) <= 3:
		return nil, d.errf("version", "big-endian GGUF (version %d) is not supported", bits.ReverseBytes32(v))
	default:
		return nil, d.errf("version", "unknown GGUF version %d (versions 2 and 3 are supported)", v)
	}
	f.Version = v
	nt, err := d.u64("tensor_count")
	if err != nil {
		return nil, err
	}
	nkv, err := d.u64("metadata_kv_count")
	if err != nil {
		return nil, err
	}
	// A key/value takes at least 13 bytes (key length, value type, one
	// byte), a tensor info at least 24: the counts are bounded by what is
	// left before anything is allocated for them.
	if nkv > uint64(d.left())/13 {
		return nil, d.errf("metadata_kv_count", "%d entries cannot fit in the %d bytes left", nkv, d.left())
	}
	if nt > uint64(d.left())/24 {
		return nil, d.errf("tensor_count", "%d tensors cannot fit in the %d bytes left", nt, d.left())
	}
	f.KVs = make([]KV, 0, nkv)
	for i := range nkv {
		key, err := d.str(fmt.Sprintf("metadata key %d", i))
		if err != nil {
			return nil, err
		}
		field := "metadata " + quoteKey(key)
		if _, dup := f.kv[key]; dup {
			return nil, d.errf(field, "duplicate key")
		}
		t, err := d.u32(field + " type")
		if err != nil {
			return nil, err
		}
		val, err := d.value(field, ValueType(t), 0)
		if err != nil {
			return nil, err
		}
		f.kv[key] = len(f.KVs)
		f.KVs = append(f.KVs, KV{key, val})
	}
	f.Alignment = DefaultAlignment
	if i, ok := f.kv[KeyAlignment]; ok {
		a, err := f.Uint(KeyAlignment)
		if err != nil {
			return nil, err
		}
		if a == 0 || a&(a-1) != 0 || a > 1<<30 {
			return nil, d.errf("metadata "+KeyAlignment, "alignment %d is not a power of two up to 2^30", a)
		}
		_ = i
		f.Alignment = int64(a)
	}
	f.Tensors = make([]Tensor, 0, nt)
	for i := range nt {
		t, err := d.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if _, dup := f.tensors[t.Name]; dup {
			return nil, d.errf("tensor "+quoteKey(t.Name), "duplicate tensor name")
		}
		f.tensors[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	start := int64(d.off)
	if r := start % f.Alignment; r != 0 {
		start += f.Alignment - r
	}
	f.DataOffset = start
	if nt > 0 && start > int64(len(data)) {
		return nil, d.errf("tensor data", "the data section starts at byte %d, beyond the end of the file (%d bytes)", start, len(data))
	}
	for i := range f.Tensors {
		t := &f.Tensors[i]
		field := "tensor " + quoteKey(t.Name)
		rel := t.Offset
		if rel%f.Alignment != 0 {
			return nil, d.errf(field, "offset %d is not a multiple of the alignment %d", rel, f.Alignment)
		}
		if rel > int64(len(data))-start || t.Size > int64(len(data))-start-rel {
			return nil, d.errf(field, "%s %v: bytes %d..%d of the data section lie beyond the end of the file (the data section holds %d bytes)",
				t.Type, t.Shape, rel, rel+t.Size, int64(len(data))-start)
		}
		t.Offset = start + rel
	}
	return f, nil
}

func quoteKey(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// decoder reads little-endian values from data, bounded by its length.
type decoder struct {
	file string
	data []byte
	off  int
}

func (d *decoder) left() int { return len(d.data) - d.off }

func (d *decoder) errf(field, format string, args ...any) error {
	return &Error{File: d.file, Field: field, Msg: fmt.Sprintf(format, args...), kind: ErrMalformed}
}

func (d *decoder) need(n uint64, field string) error {
	if n > uint64(d.left()) {
		return d.errf(field, "truncated: needs %d bytes at byte %d, the file has %d", n, d.off, len(d.data))
	}
	return nil
}

func (d *decoder) take(n int, field string) ([]byte, error) {
	if err := d.need(uint64(n), field); err != nil {
		return nil, err
	}
	b := d.data[d.off : d.off+n]
	d.off += n
	return b, nil
}

func (d *decoder) u32(field string) (uint32, error) {
	b, err := d.take(4, field)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64(field string) (uint64, error) {
	b, err := d.take(8, field)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (d *decoder) str(field string) (string, error) {
	n, err := d.u64(field + " length")
	if err != nil {
		return "", err
	}
	if err := d.need(n, field); err != nil {
		return "", err
	}
	b, _ := d.take(int(n), field)
	return string(b), nil
}

// value reads one value of type t.
func (d *decoder) value(field string, t ValueType, depth int) (Value, error) {
	if sz := t.size(); sz > 0 {
		b, err := d.take(sz, field)
		if err != nil {
			return Value{}, err
		}
		return Value{typ: t, v: scalar(t, b)}, nil
	}
	switch t {
	case TypeString:
		s, err := d.str(field)
		return Value{typ: t, v: s}, err
	case TypeArray:
		if depth >= maxDepth {
			return Value{}, d.errf(field, "arrays nested more than %d deep", maxDepth)
		}
		et, err := d.u32(field + " element type")
		if err != nil {
			return Value{}, err
		}
		n, err := d.u64(field + " array length")
		if err != nil {
			return Value{}, err
		}
		arr, err := d.array(field, ValueType(et), n, depth)
		return Value{typ: TypeArray, elem: ValueType(et), v: arr}, err
	}
	return Value{}, d.errf(field, "unknown value type %d", uint32(t))
}

// array reads n elements of type t, having checked that they fit.
func (d *decoder) array(field string, t ValueType, n uint64, depth int) (any, error) {
	min := uint64(t.size())
	switch t {
	case TypeString:
		min = 8
	case TypeArray:
		min = 12
	case TypeUint8, TypeInt8, TypeUint16, TypeInt16, TypeUint32, TypeInt32, TypeFloat32, TypeBool, TypeUint64, TypeInt64, TypeFloat64:
	default:
		return nil, d.errf(field, "unknown array element type %d", uint32(t))
	}
	if n > uint64(d.left())/min {
		return nil, d.errf(field, "array of %d %s cannot fit in the %d bytes left", n, t, d.left())
	}
	if sz := t.size(); sz > 0 {
		b, _ := d.take(int(n)*sz, field)
		return scalars(t, b, int(n)), nil
	}
	switch t {
	case TypeString:
		s := make([]string, n)
		for i := range s {
			var err error
			if s[i], err = d.str(fmt.Sprintf("%s[%d]", field, i)); err != nil {
				return nil, err
			}
		}
		return s, nil
	default:
		vs := make([]Value, n)
		for i := range vs {
			var err error
			if vs[i], err = d.value(fmt.Sprintf("%s[%d]", field, i), TypeArray, depth+1); err != nil {
				return nil, err
			}
		}
		return vs, nil
	}
}

func scalar(t ValueType, b []byte) any {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return b[0]
	case TypeInt8:
		return int8(b[0])
	case TypeBool:
		return b[0] != 0
	case TypeUint16:
		return le.Uint16(b)
	case TypeInt16:
		return int16(le.Uint16(b))
	case TypeUint32:
		return le.Uint32(b)
	case TypeInt32:
		return int32(le.Uint32(b))
	case TypeFloat32:
		return math.Float32frombits(le.Uint32(b))
	case TypeUint64:
		return le.Uint64(b)
	case TypeInt64:
		return int64(le.Uint64(b))
	case TypeFloat64:
		return math.Float64frombits(le.Uint64(b))
	}
	return nil
}

func scalars(t ValueType, b []byte, n int) any {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return append([]uint8(nil), b...)
	case TypeInt8:
		s := make([]int8, n)
		for i := range s {
			s[i] = int8(b[i])
		}
		return s
	case TypeBool:
		s := make([]bool, n)
		for i := range s {
			s[i] = b[i] != 0
		}
		return s
	case TypeUint16:
		s := make([]uint16, n)
		for i := range s {
			s[i] = le.Uint16(b[2*i:])
		}
		return s
	case TypeInt16:
		s := make([]int16, n)
		for i := range s {
			s[i] = int16(le.Uint16(b[2*i:]))
		}
		return s
	case TypeUint32:
		s := make([]uint32, n)
		for i := range s {
			s[i] = le.Uint32(b[4*i:])
		}
		return s
	case TypeInt32:
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(le.Uint32(b[4*i:]))
		}
		return s
	case TypeFloat32:
		s := make([]float32, n)
		for i := range s {
			s[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
		return s
	case TypeUint64:
		s := make([]uint64, n)
		for i := range s {
			s[i] = le.Uint64(b[8*i:])
		}
		return s
	case TypeInt64:
		s := make([]int64, n)
		for i := range s {
			s[i] = int64(le.Uint64(b[8*i:]))
		}
		return s
	case TypeFloat64:
		s := make([]float64, n)
		for i := range s {
			s[i] = math.Float64frombits(le.Uint64(b[8*i:]))
		}
		return s
	}
	return nil
}

// tensorInfo reads the i-th tensor info; its Offset is still relative to
// the data section.
func (d *decoder) tensorInfo(i uint64) (Tensor, error) {
	name, err := d.str(fmt.Sprintf("tensor %d name", i))
	if err != nil {
		return Tensor{}, err
	}
	field := "tensor " + quoteKey(name)
	nd, err := d.u32(field + " n_dims")
	if err != nil {
		return Tensor{}, err
	}
	if nd == 0 || nd > maxDims {
		return Tensor{}, d.errf(field, "%d dimensions (want 1 to %d)", nd, maxDims)
	}
	t := Tensor{Name: name, Shape: make([]int64, nd)}
	elems := int64(1)
	for j := range t.Shape {
		n, err := d.u64(fmt.Sprintf("%s ne[%d]", field, j))
		if err != nil {
			return Tensor{}, err
		}
		if n > math.MaxInt64 || (n != 0 && uint64(elems) > uint64(math.MaxInt64)/n) {
			return Tensor{}, d.errf(field, "shape %v... overflows", append(t.Shape[:j:j], int64(n)))
		}
		t.Shape[j] = int64(n)
		elems *= int64(n)
	}
	ty, err := d.u32(field + " type")
	if err != nil {
		return Tensor{}, err
	}
	t.Type = GGMLType(ty)
	be, bb := t.Type.BlockSize()
	if be == 0 {
		return Tensor{}, d.errf(field, "unknown ggml type %d", ty)
	}
	if t.Shape[0]%be != 0 {
		return Tensor{}, d.errf(field, "%s shape %v: ne[0]=%d is not a multiple of the block size %d", t.Type, t.Shape, t.Shape[0], be)
	}
	if blocks := elems / be; blocks > math.MaxInt64/bb {
		return Tensor{}, d.errf(field, "%s shape %v overflows", t.Type, t.Shape)
	} else {
		t.Size = blocks * bb
	}
	off, err := d.u64(field + " offset")
	if err != nil {
		return Tensor{}, err
	}
	if off > math.MaxInt64 {
		return Tensor{}, d.errf(field, "offset %d beyond any file", off)
	}
	t.Offset = int64(off)
	return t, nil
}

// Lookup returns a metadata value.
func (f *File) Lookup(key string) (Value, bool) {
	i, ok := f.kv[key]
	if !ok {
		return Value{}, false
	}
	return f.KVs[i].Value, true
}

// Has reports whether the metadata holds key.
func (f *File) Has(key string) bool { _, ok := f.kv[key]; return ok }

func (f *File) get(key string) (Value, error) {
	v, ok := f.Lookup(key)
	if !ok {
		return Value{}, &Error{File: f.Path, Field: "metadata " + quoteKey(key), Msg: "not found", kind: ErrNotFound}
	}
	return v, nil
}

func (f *File) typeErr(key string, v Value, want string) error {
	got := v.typ.String()
	if v.typ == TypeArray {
		got = "array of " + v.elem.String()
	}
	return &Error{File: f.Path, Field: "metadata " + quoteKey(key), Msg: fmt.Sprintf("is %s, want %s", got, want), kind: ErrMalformed}
}

// String returns a string value.
func (f *File) String(key string) (string, error) {
	v, err := f.get(key)
	if err != nil {
		return "", err
	}
	s, ok := v.v.(string)
	if !ok {
		return "", f.typeErr(key, v, "string")
	}
	return s, nil
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.get(key)
	if err != nil {
		return false, err
	}
	b, ok := v.v.(bool)
	if !ok {
		return false, f.typeErr(key, v, "bool")
	}
	return b, nil
}

// asInt converts any integer scalar; ok is false for other types, inRange
// false for a uint64 above MaxInt64.
func asInt(x any) (n int64, u uint64, neg, ok bool) {
	switch x := x.(type) {
	case uint8:
		return int64(x), uint64(x), false, true
	case uint16:
		return int64(x), uint64(x), false, true
	case uint32:
		return int64(x), uint64(x), false, true
	case uint64:
		return int64(x), x, false, true
	case int8:
		return int64(x), uint64(x), x < 0, true
	case int16:
		return int64(x), uint64(x), x < 0, true
	case int32:
		return int64(x), uint64(x), x < 0, true
	case int64:
		return x, uint64(x), x < 0, true
	}
	return 0, 0, false, false
}

// Int returns an integer value of any integer type, as an int64.
func (f *File) Int(key string) (int64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	n, u, neg, ok := asInt(v.v)
	if !ok {
		return 0, f.typeErr(key, v, "an integer")
	}
	if !neg && u > math.MaxInt64 {
		return 0, &Error{File: f.Path, Field: "metadata " + quoteKey(key), Msg: fmt.Sprintf("%d does not fit an int64", u), kind: ErrMalformed}
	}
	return n, nil
}

// Uint returns a non-negative integer value of any integer type.
func (f *File) Uint(key string) (uint64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	_, u, neg, ok := asInt(v.v)
	if !ok {
		return 0, f.typeErr(key, v, "an unsigned integer")
	}
	if neg {
		return 0, &Error{File: f.Path, Field: "metadata " + quoteKey(key), Msg: fmt.Sprintf("%v is negative", v.v), kind: ErrMalformed}
	}
	return u, nil
}

// Float returns a float32 or float64 value (an integer is accepted too) as
// a float64.
func (f *File) Float(key string) (float64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	switch x := v.v.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	if n, u, neg, ok := asInt(v.v); ok {
		if neg {
			return float64(n), nil
		}
		return float64(u), nil
	}
	return 0, f.typeErr(key, v, "a number")
}

func (f *File) array(key string) (Value, error) {
	v, err := f.get(key)
	if err != nil {
		return Value{}, err
	}
	if v.typ != TypeArray {
		return Value{}, f.typeErr(key, v, "an array")
	}
	return v, nil
}

// Strings returns an array of strings. The caller must not modify it.
func (f *File) Strings(key string) ([]string, error) {
	v, err := f.array(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.v.([]string)
	if !ok {
		return nil, f.typeErr(key, v, "array of string")
	}
	return s, nil
}

// Float32s returns an array of float32 (float64 elements are rounded).
func (f *File) Float32s(key string) ([]float32, error) {
	v, err := f.array(key)
	if err != nil {
		return nil, err
	}
	switch a := v.v.(type) {
	case []float32:
		return a, nil
	case []float64:
		s := make([]float32, len(a))
		for i, x := range a {
			s[i] = float32(x)
		}
		return s, nil
	}
	return nil, f.typeErr(key, v, "array of float32")
}

// Ints returns an array of any integer type as int64s.
func (f *File) Ints(key string) ([]int64, error) {
	v, err := f.array(key)
	if err != nil {
		return nil, err
	}
	n := v.Len()
	out := make([]int64, n)
	switch a := v.v.(type) {
	case []uint8:
		for i, x := range a {
			out[i] = int64(x)
		}
	case []int8:
		for i, x := range a {
			out[i] = int64(x)
		}
	case []uint16:
		for i, x := range a {
			out[i] = int64(x)
		}
	case []int16:
		for i, x := range a {
			out[i] = int64(x)
		}
	case []uint32:
		for i, x := range a {
			out[i] = int64(x)
		}
	case []int32:
		for i, x := range a {
			out[i] = int64(x)
		}
	case []int64:
		copy(out, a)
	case []uint64:
		for i, x := range a {
			if x > math.MaxInt64 {
				return nil, &Error{File: f.Path, Field: fmt.Sprintf("metadata %s[%d]", quoteKey(key), i), Msg: fmt.Sprintf("%d does not fit an int64", x), kind: ErrMalformed}
			}
			out[i] = int64(x)
		}
	default:
		return nil, f.typeErr(key, v, "array of integers")
	}
	return out, nil
}

// Tensor returns the named tensor's info.
func (f *File) Tensor(name string) (Tensor, bool) {
	i, ok := f.tensors[name]
	if !ok {
		return Tensor{}, false
	}
	return f.Tensors[i], true
}

// Data returns a tensor's bytes: a slice of the file's mapping, valid until
// Close. The caller must not modify it.
func (f *File) Data(t Tensor) []byte { return f.src.Slice(t.Offset, t.Size) }

// TensorData returns the named tensor's info and bytes (see Data).
func (f *File) TensorData(name string) (Tensor, []byte, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return Tensor{}, nil, &Error{File: f.Path, Field: "tensor " + quoteKey(name), Msg: "not found", kind: ErrNotFound}
	}
	if f.src.Closed() {
		return Tensor{}, nil, fmt.Errorf("gguf: %s: tensor %s: the file is closed", f.Path, quoteKey(name))
	}
	return t, f.Data(t), nil
}

// Architecture is general.architecture ("llama", "qwen2", ...).
func (f *File) Architecture() (string, error) { return f.String("general.architecture") }

// KeysWithPrefix lists the metadata keys starting with prefix, sorted.
func (f *File) KeysWithPrefix(prefix string) []string {
	var ks []string
	for _, kv := range f.KVs {
		if strings.HasPrefix(kv.Key, prefix) {
			ks = append(ks, kv.Key)
		}
	}
	sort.Strings(ks)
	return ks
}

// Retain keeps b, tensor bytes from Data, valid past Close until release
// is called, with its pages read in now, for a device that reads them in
// place (see mapped.File.Retain). ok is false for a closed file, one from
// Parse, or bytes that are not the file's.
func (f *File) Retain(b []byte) (release func(), ok bool) { return f.src.Retain(b) }

// Drop tells the system that a tensor's pages may leave this process's
// resident memory (they stay in the page cache): a loader calls it once the
// tensor is on the device. The bytes stay readable.
func (f *File) Drop(t Tensor) { f.src.Drop(f.Data(t)) }
