package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"testing"
)

// A minimal GGUF reader for the fixture tests: just enough to find each
// tensor's type, shape and bytes (the project's full reader is model/gguf,
// which itself depends on this package).
type ggufTensor struct {
	name  string
	typ   Type
	shape []int64
	data  []byte
}

func readGGUF(t testing.TB, path string) map[string]ggufTensor {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &ggufReader{b: b}
	if string(r.next(4)) != "GGUF" {
		t.Fatalf("%s: not GGUF", path)
	}
	r.u32() // version
	nt, nkv := r.u64(), r.u64()
	align := uint64(32)
	for i := uint64(0); i < nkv; i++ {
		key := r.str()
		vt := r.u32()
		if key == "general.alignment" && vt == 4 {
			align = uint64(r.u32())
			continue
		}
		r.skip(vt)
	}
	var ts []ggufTensor
	var offs []uint64
	for i := uint64(0); i < nt; i++ {
		tt := ggufTensor{name: r.str()}
		nd := r.u32()
		for d := uint32(0); d < nd; d++ {
			tt.shape = append(tt.shape, int64(r.u64()))
		}
		tt.typ = Type(r.u32())
		offs = append(offs, r.u64())
		ts = append(ts, tt)
	}
	if r.err != nil {
		t.Fatalf("%s: %v", path, r.err)
	}
	start := (uint64(r.off) + align - 1) / align * align
	out := map[string]ggufTensor{}
	for i, tt := range ts {
		n := int64(1)
		for _, d := range tt.shape {
			n *= d
		}
		sz, err := RowBytes(tt.typ, n)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, tt.name, err)
		}
		o := start + offs[i]
		if o+uint64(sz) > uint64(len(b)) {
			t.Fatalf("%s: %s beyond the file", path, tt.name)
		}
		tt.data = b[o : o+uint64(sz)]
		out[tt.name] = tt
	}
	return out
}

type ggufReader struct {
	b   []byte
	off int
	err error
}

func (r *ggufReader) next(n int) []byte {
	if r.err != nil || n < 0 || r.off+n > len(r.b) {
		if r.err == nil {
			r.err = fmt.Errorf("truncated at %d", r.off)
		}
		return make([]byte, max(n, 0))
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}
func (r *ggufReader) u32() uint32 { return binary.LittleEndian.Uint32(r.next(4)) }
func (r *ggufReader) u64() uint64 { return binary.LittleEndian.Uint64(r.next(8)) }
func (r *ggufReader) str() string {
	n := r.u64()
	if n > uint64(len(r.b)) {
		r.err = fmt.Errorf("string of %d bytes", n)
		return ""
	}
	return string(r.next(int(n)))
}

func (r *ggufReader) skip(vt uint32) {
	switch vt {
	case 0, 1, 7: // u8, i8, bool
		r.next(1)
	case 2, 3:
		r.next(2)
	case 4, 5, 6:
		r.next(4)
	case 10, 11, 12:
		r.next(8)
	case 8:
		r.str()
	case 9:
		et := r.u32()
		n := r.u64()
		for i := uint64(0); i < n && r.err == nil; i++ {
			r.skip(et)
		}
	default:
		r.err = fmt.Errorf("value type %d", vt)
	}
}

func f32s(b []byte) []float32 {
	x := make([]float32, len(b)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}
