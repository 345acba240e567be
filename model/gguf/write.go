package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Writer builds a GGUF v3 file: metadata in the order added, then tensor
// infos and data, each tensor aligned. The project writes GGUF files for its
// tests and benchmarks (and `reprise convert`); llama.cpp reads them.
type Writer struct {
	kvs     []KV
	tensors []Tensor
	data    [][]byte
	align   int64
}

// NewWriter returns an empty Writer with the default alignment.
func NewWriter() *Writer { return &Writer{align: DefaultAlignment} }

// Set adds a metadata key. v is a uint8..float64, bool or string, a slice of
// one of them, or a Value; general.alignment sets the alignment of the data.
func (w *Writer) Set(key string, v any) error {
	val, err := toValue(v)
	if err != nil {
		return fmt.Errorf("gguf: key %q: %w", key, err)
	}
	if key == KeyAlignment {
		n, u, neg, ok := asInt(val.v)
		if !ok || neg || u == 0 || u&(u-1) != 0 {
			return fmt.Errorf("gguf: key %q: want a power of two", key)
		}
		w.align = n
	}
	w.kvs = append(w.kvs, KV{key, val})
	return nil
}

// AddTensor adds a tensor: shape in ggml order (Shape[0] contiguous), data
// its encoded bytes, len(data) must match the type and shape.
func (w *Writer) AddTensor(name string, t GGMLType, shape []int64, data []byte) error {
	be, bb := t.BlockSize()
	if be == 0 {
		return fmt.Errorf("gguf: tensor %q: unknown type %d", name, t)
	}
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if len(shape) == 0 || shape[0]%be != 0 || n/be*bb != int64(len(data)) {
		return fmt.Errorf("gguf: tensor %q: %s shape %v does not match %d bytes", name, t, shape, len(data))
	}
	w.tensors = append(w.tensors, Tensor{Name: name, Type: t, Shape: append([]int64(nil), shape...), Size: int64(len(data))})
	w.data = append(w.data, data)
	return nil
}

// WriteTo writes the file.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	cw := &countWriter{w: bufio.NewWriterSize(out, 1<<20)}
	le := binary.LittleEndian
	u32 := func(v uint32) { cw.write(le.AppendUint32(nil, v)) }
	u64 := func(v uint64) { cw.write(le.AppendUint64(nil, v)) }
	str := func(s string) { u64(uint64(len(s))); cw.write([]byte(s)) }
	cw.write([]byte(Magic))
	u32(3)
	u64(uint64(len(w.tensors)))
	u64(uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		str(kv.Key)
		u32(uint32(kv.Value.typ))
		writeValue(cw, kv.Value)
	}
	off := int64(0)
	for _, t := range w.tensors {
		str(t.Name)
		u32(uint32(len(t.Shape)))
		for _, d := range t.Shape {
			u64(uint64(d))
		}
		u32(uint32(t.Type))
		u64(uint64(off))
		off += t.Size
		if r := off % w.align; r != 0 {
			off += w.align - r
		}
	}
	pad := func() {
		if r := cw.n % w.align; r != 0 {
			cw.write(make([]byte, w.align-r))
		}
	}
	pad()
	for _, d := range w.data {
		cw.write(d)
		pad()
	}
	if cw.err == nil {
		cw.err = cw.w.(*bufio.Writer).Flush()
	}
	return cw.n, cw.err
}

type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
}

func writeValue(cw *countWriter, v Value) {
	le := binary.LittleEndian
	if v.typ == TypeArray {
		cw.write(le.AppendUint32(nil, uint32(v.elem)))
		cw.write(le.AppendUint64(nil, uint64(v.Len())))
		switch a := v.v.(type) {
		case []string:
			for _, s := range a {
				writeValue(cw, Value{typ: TypeString, v: s})
			}
		case []Value:
			for _, e := range a {
				writeValue(cw, e)
			}
		default:
			forEach(a, func(x any) { writeValue(cw, Value{typ: v.elem, v: x}) })
		}
		return
	}
	var b []byte
	switch x := v.v.(type) {
	case uint8:
		b = []byte{x}
	case int8:
		b = []byte{byte(x)}
	case bool:
		if x {
			b = []byte{1}
		} else {
			b = []byte{0}
		}
	case uint16:
		b = le.AppendUint16(nil, x)
	case int16:
		b = le.AppendUint16(nil, uint16(x))
	case uint32:
		b = le.AppendUint32(nil, x)
	case int32:
		b = le.AppendUint32(nil, uint32(x))
	case float32:
		b = le.AppendUint32(nil, math.Float32bits(x))
	case uint64:
		b = le.AppendUint64(nil, x)
	case int64:
		b = le.AppendUint64(nil, uint64(x))
	case float64:
		b = le.AppendUint64(nil, math.Float64bits(x))
	case string:
		b = append(le.AppendUint64(nil, uint64(len(x))), x...)
	}
	cw.write(b)
}

func forEach(a any, f func(any)) {
	switch a := a.(type) {
	case []uint8:
		for _, x := range a {
			f(x)
		}
	case []int8:
		for _, x := range a {
			f(x)
		}
	case []bool:
		for _, x := range a {
			f(x)
		}
	case []uint16:
		for _, x := range a {
			f(x)
		}
	case []int16:
		for _, x := range a {
			f(x)
		}
	case []uint32:
		for _, x := range a {
			f(x)
		}
	case []int32:
		for _, x := range a {
			f(x)
		}
	case []float32:
		for _, x := range a {
			f(x)
		}
	case []uint64:
		for _, x := range a {
			f(x)
		}
	case []int64:
		for _, x := range a {
			f(x)
		}
	case []float64:
		for _, x := range a {
			f(x)
		}
	}
}

// toValue wraps a Go value as a metadata Value.
func toValue(v any) (Value, error) {
	switch x := v.(type) {
	case Value:
		return x, nil
	case uint8:
		return Value{typ: TypeUint8, v: x}, nil
	case int8:
		return Value{typ: TypeInt8, v: x}, nil
	case uint16:
		return Value{typ: TypeUint16, v: x}, nil
	case int16:
		return Value{typ: TypeInt16, v: x}, nil
	case uint32:
		return Value{typ: TypeUint32, v: x}, nil
	case int32:
		return Value{typ: TypeInt32, v: x}, nil
	case float32:
		return Value{typ: TypeFloat32, v: x}, nil
	case bool:
		return Value{typ: TypeBool, v: x}, nil
	case string:
		return Value{typ: TypeString, v: x}, nil
	case uint64:
		return Value{typ: TypeUint64, v: x}, nil
	case int64:
		return Value{typ: TypeInt64, v: x}, nil
	case float64:
		return Value{typ: TypeFloat64, v: x}, nil
	case []uint8:
		return Value{typ: TypeArray, elem: TypeUint8, v: x}, nil
	case []int8:
		return Value{typ: TypeArray, elem: TypeInt8, v: x}, nil
	case []uint16:
		return Value{typ: TypeArray, elem: TypeUint16, v: x}, nil
	case []int16:
		return Value{typ: TypeArray, elem: TypeInt16, v: x}, nil
	case []uint32:
		return Value{typ: TypeArray, elem: TypeUint32, v: x}, nil
	case []int32:
		return Value{typ: TypeArray, elem: TypeInt32, v: x}, nil
	case []float32:
		return Value{typ: TypeArray, elem: TypeFloat32, v: x}, nil
	case []bool:
		return Value{typ: TypeArray, elem: TypeBool, v: x}, nil
	case []string:
		return Value{typ: TypeArray, elem: TypeString, v: x}, nil
	case []uint64:
		return Value{typ: TypeArray, elem: TypeUint64, v: x}, nil
	case []int64:
		return Value{typ: TypeArray, elem: TypeInt64, v: x}, nil
	case []float64:
		return Value{typ: TypeArray, elem: TypeFloat64, v: x}, nil
	case []Value:
		for _, e := range x {
			if e.typ != TypeArray {
				return Value{}, fmt.Errorf("an array of values must hold arrays")
			}
		}
		return Value{typ: TypeArray, elem: TypeArray, v: x}, nil
	}
	return Value{}, fmt.Errorf("cannot store %T", v)
}

// ArrayValue wraps a slice as an array Value (for arrays of arrays).
func ArrayValue(slice any) (Value, error) {
	v, err := toValue(slice)
	if err == nil && v.typ != TypeArray {
		err = fmt.Errorf("%T is not a slice", slice)
	}
	return v, err
}
