package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestStories260K(t *testing.T) {
	f, err := Open("testdata/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Version != 3 || len(f.Tensors) != 48 || len(f.KVs) != 19 || f.Alignment != 32 {
		t.Fatalf("version %d, %d tensors, %d keys, alignment %d", f.Version, len(f.Tensors), len(f.KVs), f.Alignment)
	}
	if a, err := f.Architecture(); err != nil || a != "llama" {
		t.Fatalf("architecture %q %v", a, err)
	}
	for key, want := range map[string]int64{"llama.context_length": 128, "llama.embedding_length": 64,
		"llama.block_count": 5, "llama.attention.head_count": 8, "llama.attention.head_count_kv": 4, "tokenizer.ggml.bos_token_id": 1} {
		if n, err := f.Int(key); err != nil || n != want {
			t.Errorf("%s = %d %v, want %d", key, n, err, want)
		}
	}
	if eps, err := f.Float("llama.attention.layer_norm_rms_epsilon"); err != nil || float32(eps) != 1e-5 {
		t.Errorf("eps %v %v", eps, err)
	}
	toks, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil || len(toks) != 512 || toks[0] != "<unk>" || toks[1] != "<s>" {
		t.Fatalf("tokens: %d %v", len(toks), err)
	}
	if s, err := f.Float32s("tokenizer.ggml.scores"); err != nil || len(s) != 512 {
		t.Errorf("scores: %d %v", len(s), err)
	}
	if tt, err := f.Ints("tokenizer.ggml.token_type"); err != nil || len(tt) != 512 || tt[1] != 3 {
		t.Errorf("token types: %v %v", tt[:3], err)
	}
	ti, data, err := f.TensorData("blk.0.attn_k.weight")
	if err != nil {
		t.Fatal(err)
	}
	if ti.Type != F32 || !reflect.DeepEqual(ti.Shape, []int64{64, 32}) || len(data) != 64*32*4 || ti.Offset%32 != 0 {
		t.Fatalf("attn_k: %+v, %d bytes", ti, len(data))
	}
	// The llama2.c converter copied the checkpoint's floats: the first
	// value of wk in layer 0 is the checkpoint's.
	ck, err := os.ReadFile("../stories260k/stories260K.bin")
	if err != nil {
		t.Fatal(err)
	}
	const dim, vocab, layers = 64, 512, 5
	wk0 := 28 + 4*(vocab*dim+layers*dim+layers*dim*dim)
	if !bytes.Equal(data[:16], ck[wk0:wk0+16]) {
		t.Errorf("attn_k bytes %x, checkpoint %x", data[:16], ck[wk0:wk0+16])
	}
	if _, _, err := f.TensorData("nope"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "stories260K.gguf") {
		t.Errorf("missing tensor: %v", err)
	}
	if _, err := f.Int("general.name"); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), `"general.name"`) {
		t.Errorf("type mismatch: %v", err)
	}
	if _, err := f.String("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing key: %v", err)
	}
}

// sample builds a small file with every value type.
func sample(t testing.TB) []byte {
	w := NewWriter()
	nested, err := ArrayValue([]Value{{typ: TypeArray, elem: TypeInt16, v: []int16{-1, 2}}, {typ: TypeArray, elem: TypeString, v: []string{"x"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []struct {
		k string
		v any
	}{
		{"general.architecture", "llama"}, {"u8", uint8(200)}, {"i8", int8(-3)}, {"u16", uint16(60000)},
		{"i16", int16(-300)}, {"u32", uint32(4e9)}, {"i32", int32(-7)}, {"f32", float32(0.5)}, {"b", true},
		{"u64", uint64(math.MaxUint64)}, {"i64", int64(-1 << 40)}, {"f64", 1e-300}, {KeyAlignment, uint32(64)},
		{"strs", []string{"a", "", "ünï"}}, {"f32s", []float32{1, 2.5}}, {"i32s", []int32{-1, 3}}, {"u8s", []uint8{1, 2}},
		{"bools", []bool{true, false}}, {"f64s", []float64{3}}, {"u64s", []uint64{1 << 63}}, {"nested", nested},
	} {
		if err := w.Set(kv.k, kv.v); err != nil {
			t.Fatal(err)
		}
	}
	f32 := make([]byte, 4*6)
	for i := range 6 {
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(float32(i)))
	}
	must(t, w.AddTensor("a", F32, []int64{3, 2}, f32))
	must(t, w.AddTensor("q", Q8_0, []int64{32}, make([]byte, 34)))
	must(t, w.AddTensor("h", F16, []int64{1}, []byte{0, 0x3c}))
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	data := sample(t)
	f, err := Parse("sample.gguf", data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Alignment != 64 || f.DataOffset%64 != 0 || len(f.Tensors) != 3 {
		t.Fatalf("alignment %d, data at %d, %d tensors", f.Alignment, f.DataOffset, len(f.Tensors))
	}
	for _, tc := range []struct {
		key  string
		want any
	}{
		{"u8", uint8(200)}, {"i8", int8(-3)}, {"u16", uint16(60000)}, {"i16", int16(-300)}, {"u32", uint32(4e9)},
		{"i32", int32(-7)}, {"f32", float32(0.5)}, {"b", true}, {"u64", uint64(math.MaxUint64)}, {"i64", int64(-1 << 40)},
		{"f64", 1e-300}, {"strs", []string{"a", "", "ünï"}}, {"bools", []bool{true, false}},
	} {
		v, ok := f.Lookup(tc.key)
		if !ok || !reflect.DeepEqual(v.Any(), tc.want) {
			t.Errorf("%s = %#v, want %#v", tc.key, v.Any(), tc.want)
		}
	}
	if n, err := f.Int("i8"); n != -3 || err != nil {
		t.Errorf("Int(i8) %d %v", n, err)
	}
	if _, err := f.Int("u64"); !errors.Is(err, ErrMalformed) {
		t.Errorf("Int(u64 max): %v", err)
	}
	if _, err := f.Uint("i32"); !errors.Is(err, ErrMalformed) {
		t.Errorf("Uint(negative): %v", err)
	}
	if x, err := f.Float("i32"); x != -7 || err != nil {
		t.Errorf("Float(i32) %v %v", x, err)
	}
	if b, err := f.Bool("b"); !b || err != nil {
		t.Errorf("Bool %v %v", b, err)
	}
	if s, err := f.Ints("i32s"); !reflect.DeepEqual(s, []int64{-1, 3}) || err != nil {
		t.Errorf("Ints %v %v", s, err)
	}
	if _, err := f.Ints("u64s"); !errors.Is(err, ErrMalformed) {
		t.Errorf("Ints(1<<63): %v", err)
	}
	if s, err := f.Float32s("f64s"); !reflect.DeepEqual(s, []float32{3}) || err != nil {
		t.Errorf("Float32s(f64s) %v %v", s, err)
	}
	if _, err := f.Strings("f32s"); !errors.Is(err, ErrMalformed) {
		t.Errorf("Strings(f32s): %v", err)
	}
	nv, _ := f.Lookup("nested")
	if nv.Elem() != TypeArray || nv.Len() != 2 || nv.Any().([]Value)[1].Any().([]string)[0] != "x" {
		t.Errorf("nested %v", nv)
	}
	a, d, err := f.TensorData("a")
	if err != nil || a.Elements() != 6 || math.Float32frombits(binary.LittleEndian.Uint32(d[20:])) != 5 {
		t.Fatalf("a: %+v %v", a, err)
	}
	for _, ti := range f.Tensors {
		if (ti.Offset-f.DataOffset)%64 != 0 {
			t.Errorf("%s at %d: not aligned", ti.Name, ti.Offset)
		}
	}
	if got := f.KeysWithPrefix("u"); !reflect.DeepEqual(got, []string{"u16", "u32", "u64", "u64s", "u8", "u8s"}) {
		t.Errorf("KeysWithPrefix %v", got)
	}
	// Writing what was read gives the same bytes.
	w := NewWriter()
	for _, kv := range f.KVs {
		must(t, w.Set(kv.Key, kv.Value))
	}
	for _, ti := range f.Tensors {
		must(t, w.AddTensor(ti.Name, ti.Type, ti.Shape, f.Data(ti)))
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil || !bytes.Equal(b.Bytes(), data) {
		t.Errorf("rewrite differs (%v)", err)
	}
}

// TestTruncated: every prefix of a file is an error naming the file, never
// a panic.
func TestTruncated(t *testing.T) {
	data := sample(t)
	f, err := Parse("sample.gguf", data)
	if err != nil {
		t.Fatal(err)
	}
	// The padding after the last tensor may go.
	last := f.Tensors[len(f.Tensors)-1]
	for n := range int(last.Offset + last.Size) {
		_, err := Parse("cut.gguf", data[:n])
		if err == nil {
			t.Fatalf("%d of %d bytes parsed", n, len(data))
		}
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "cut.gguf") {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
}

// header writes a file header and returns a patchable buffer.
func le32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func le64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }
func gstr(b []byte, s string) []byte { return append(le64(b, uint64(len(s))), s...) }

func TestBadFiles(t *testing.T) {
	hdr := func(version uint32, tensors, kvs uint64) []byte {
		return le64(le64(le32([]byte("GGUF"), version), tensors), kvs)
	}
	tensor := func(b []byte, name string, typ uint32, off uint64, shape ...uint64) []byte {
		b = le32(gstr(b, name), uint32(len(shape)))
		for _, d := range shape {
			b = le64(b, d)
		}
		return le64(le32(b, typ), off)
	}
	pad := func(b []byte, n int) []byte {
		for len(b)%32 != 0 {
			b = append(b, 0)
		}
		return append(b, make([]byte, n)...)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "magic: not a GGUF file"},
		{"other magic", []byte("\x7fELF...."), "not a GGUF file"},
		{"v1", hdr(1, 0, 0), "version 1 is not supported"},
		{"big endian", []byte("GGUF\x00\x00\x00\x03" + strings.Repeat("\x00", 16)), "big-endian"},
		{"v9", hdr(9, 0, 0), "unknown GGUF version 9"},
		{"huge kv count", hdr(3, 0, 1<<60), "metadata_kv_count: 1152921504606846976 entries cannot fit"},
		{"huge tensor count", hdr(3, 1<<40, 0), "tensor_count: 1099511627776 tensors cannot fit"},
		{"huge key", append(le64(hdr(3, 0, 1), 1<<62), make([]byte, 16)...), "metadata key 0: truncated"},
		{"huge string", le64(le32(gstr(hdr(3, 0, 1), "k"), 8), 1<<40), `metadata "k": truncated`},
		{"huge array", append(le64(le32(le32(gstr(hdr(3, 0, 1), "k"), 9), 6), 1<<40), 0, 0, 0, 0), "array of 1099511627776 float32 cannot fit"},
		{"huge string array", append(le64(le32(le32(gstr(hdr(3, 0, 1), "k"), 9), 8), 1<<20), make([]byte, 64)...), "array of 1048576 string cannot fit"},
		{"unknown value type", append(le32(gstr(hdr(3, 0, 1), "k"), 77), 0, 0, 0, 0), "unknown value type 77"},
		{"unknown element type", append(le64(le32(le32(gstr(hdr(3, 0, 1), "k"), 9), 99), 1), 0, 0, 0, 0), "unknown array element type 99"},
		{"duplicate key", append(le32(gstr(append(le32(gstr(hdr(3, 0, 2), "k"), 0), 1), "k"), 0), 1), `"k": duplicate key`},
		{"bad alignment", le32(le32(gstr(hdr(3, 0, 1), KeyAlignment), 4), 48), "alignment 48 is not a power of two"},
		{"alignment type", append(le32(gstr(hdr(3, 0, 1), KeyAlignment), 6), 0, 0, 0x80, 0x3f), "is float32, want an unsigned integer"},
		{"no dims", pad(tensor(hdr(3, 1, 0), "w", 0, 0), 0), `tensor "w": 0 dimensions`},
		{"five dims", pad(tensor(hdr(3, 1, 0), "w", 0, 0, 1, 1, 1, 1, 1), 4), `tensor "w": 5 dimensions`},
		{"unknown ggml type", pad(tensor(hdr(3, 1, 0), "w", 5, 0, 4), 16), `tensor "w": unknown ggml type 5`},
		{"partial block", pad(tensor(hdr(3, 1, 0), "w", 8, 0, 16), 34), "ne[0]=16 is not a multiple of the block size 32"},
		{"shape overflow", pad(tensor(hdr(3, 1, 0), "w", 0, 0, 1<<32, 1<<32), 0), "overflows"},
		{"beyond the file", pad(tensor(hdr(3, 1, 0), "w", 0, 0, 8), 16), `tensor "w": F32 [8]: bytes 0..32 of the data section lie beyond the end of the file`},
		{"offset beyond", pad(tensor(hdr(3, 1, 0), "w", 0, 1<<40, 1), 16), "lie beyond the end"},
		{"unaligned offset", pad(tensor(hdr(3, 1, 0), "w", 0, 4, 1), 16), "offset 4 is not a multiple of the alignment 32"},
		{"duplicate tensor", pad(tensor(tensor(hdr(3, 2, 0), "w", 0, 0, 1), "w", 0, 0, 1), 64), "duplicate tensor name"},
		{"no data section", tensor(hdr(3, 1, 0), "w", 0, 0, 1), "data section starts at byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.gguf", tc.data)
			if err == nil {
				t.Fatal("parsed")
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "gguf: bad.gguf: ") {
				t.Fatalf("error %q, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "none.gguf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Open(dir); err == nil {
		t.Error("a directory opened")
	}
	p := filepath.Join(dir, "x.gguf")
	must(t, os.WriteFile(p, sample(t)[:100], 0o644))
	if _, err := Open(p); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), p) {
		t.Errorf("truncated file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample(f))
	if b, err := os.ReadFile("testdata/stories260K.gguf"); err == nil {
		f.Add(b[:20000]) // the header and the first tensors
	}
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Parse("fuzz.gguf", data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		for _, ti := range g.Tensors {
			if d := g.Data(ti); int64(len(d)) != ti.Size {
				t.Fatalf("tensor %q: %d bytes, size %d", ti.Name, len(d), ti.Size)
			}
		}
		for _, kv := range g.KVs {
			_ = kv.Value.String()
		}
	})
}

// llama.cpp's converters write uint32 -1 for an absent special token.
func TestVocabNoToken(t *testing.T) {
	f, err := Open("testdata/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := f.Vocab()
	if err != nil {
		t.Fatal(err)
	}
	if v.PAD != -1 || v.BOS != 1 || v.EOS != 2 || len(v.Tokens) != 512 || v.Model != "llama" {
		t.Fatalf("vocab: pad %d bos %d eos %d, %d tokens, model %q", v.PAD, v.BOS, v.EOS, len(v.Tokens), v.Model)
	}
}
