package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func sample(t testing.TB) []byte {
	var b bytes.Buffer
	err := Write(&b, []WriteTensor{
		{"a", F32, []int64{2, 3}, make([]byte, 24)},
		{"b", BF16, []int64{4}, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{"s", F16, []int64{}, []byte{0, 0x3c}},
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestRoundTrip(t *testing.T) {
	data := sample(t)
	f, err := Parse("x.safetensors", data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["format"] != "pt" || len(f.Tensors) != 3 {
		t.Fatalf("%v %d", f.Metadata, len(f.Tensors))
	}
	b, ok := f.Tensor("b")
	if !ok || b.DType != BF16 || !reflect.DeepEqual(b.Shape, []int64{4}) || !bytes.Equal(f.Data(b), []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("b: %+v %v", b, f.Data(b))
	}
	if s, _ := f.Tensor("s"); s.Elements() != 1 || s.Size != 2 {
		t.Fatalf("scalar: %+v", s)
	}
	if (8+binary.LittleEndian.Uint64(data))%8 != 0 {
		t.Error("header not padded to 8")
	}
}

func TestTruncated(t *testing.T) {
	data := sample(t)
	for n := range len(data) {
		if _, err := Parse("cut.safetensors", data[:n]); err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "cut.safetensors") {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
}

func file(hdr string, data int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	return append(append(b, hdr...), make([]byte, data)...)
}

func TestBadFiles(t *testing.T) {
	huge := binary.LittleEndian.AppendUint64(nil, 1<<40)
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"huge header", append(huge, "{}"...), "header length: 1099511627776 bytes, more than"},
		{"header beyond", file("{}", 0)[:9], "but the file has only"},
		{"not an object", file("[1]", 0), "not a JSON object"},
		{"bad json", file(`{"a":`, 0), "bad"},
		{"unknown dtype", file(`{"a":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}}`, 1), `tensor "a": unknown dtype "F4"`},
		{"negative shape", file(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), "bad shape"},
		{"shape overflow", file(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4), "bad shape"},
		{"beyond the file", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4), "lie beyond the end of the file"},
		{"size mismatch", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 8), "needs 8 bytes, data_offsets [0 4] hold 4"},
		{"reversed", file(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, 8), "bad data_offsets"},
		{"duplicate", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), "appears twice"},
		{"overlap", file(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, 3), "overlap"},
		{"metadata", file(`{"__metadata__":{"x":1}}`, 0), "__metadata__"},
		{"trailing", file(`{}{}`, 0), "trailing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("bad.safetensors", c.data)
			if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.safetensors") {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestOpenDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, ts []WriteTensor) {
		var b bytes.Buffer
		if err := Write(&b, ts, nil); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("model-00001-of-00002.safetensors", []WriteTensor{{"x", U8, []int64{1}, []byte{7}}})
	write("model-00002-of-00002.safetensors", []WriteTensor{{"y", U8, []int64{2}, []byte{8, 9}}})
	index := func(wm map[string]string) {
		js, err := Index(wm, 3)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, IndexName), js, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	index(map[string]string{"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"})
	m, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	y, f, ok := m.Tensor("y")
	if !ok || !bytes.Equal(f.Data(y), []byte{8, 9}) || !reflect.DeepEqual(m.Names(), []string{"x", "y"}) || len(m.Files) != 2 {
		t.Fatalf("y: %v %v", ok, m.Names())
	}
	m.Close()
	for _, c := range []struct {
		wm   map[string]string
		want string
	}{
		{map[string]string{"x": "model-00003-of-00002.safetensors"}, `shard "model-00003-of-00002.safetensors" (weight_map "x")`},
		{map[string]string{"x": "../model-00001-of-00002.safetensors"}, "is not a file name in the directory"},
		{map[string]string{"y": "model-00001-of-00002.safetensors"}, `weight_map "y": shard model-00001-of-00002.safetensors has no such tensor`},
		{map[string]string{}, "weight_map: empty"},
	} {
		index(c.wm)
		if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), IndexName) {
			t.Errorf("%v: %v, want %q", c.wm, err, c.want)
		}
	}
	if _, err := OpenDir(t.TempDir()); !errors.Is(err, ErrNotFound) {
		t.Errorf("empty dir: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample(f))
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Parse("fuzz", data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("not ErrMalformed: %v", err)
			}
			return
		}
		for _, x := range g.Tensors {
			if int64(len(g.Data(x))) != x.Size || x.Size != x.Elements()*x.DType.Size() {
				t.Fatalf("tensor %q: %d bytes", x.Name, len(g.Data(x)))
			}
		}
	})
}
