package llama

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/quant"
)

func TestRotateHalfPermutation(t *testing.T) {
	for _, hd := range []int{2, 8, 64} {
		seen := map[int]bool{}
		for r := range 3 * hd {
			s := interleavedFrom(r, hd)
			if seen[s] || s/hd != r/hd {
				t.Fatalf("hd %d: row %d from %d: not a permutation within the head", hd, r, s)
			}
			seen[s] = true
			if rotateHalfFrom(s, hd) != r {
				t.Fatalf("hd %d: the two directions are not inverse at row %d", hd, r)
			}
		}
	}
	// Interleaved row 2j+t is rotate-half row j + t*hd/2.
	if interleavedFrom(1, 8) != 4 || interleavedFrom(2, 8) != 1 || interleavedFrom(8+7, 8) != 8+7 || rotateHalfFrom(4, 8) != 1 {
		t.Fatal("wrong pairing")
	}
	// Uploading a rotate-half matrix and vector gives the interleaved ones.
	dev := cpuDevice(t)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	u, err := newUploader(dev, s, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer u.close()
	const rows, cols = 8, 3
	inter := make([]float32, rows*cols)
	for i := range inter {
		inter[i] = float32(i)
	}
	hf := make([]float32, rows*cols)
	for r := range rows {
		copy(hf[r*cols:(r+1)*cols], inter[rotateHalfFrom(r, 4)*cols:])
	}
	vec := []float32{0, 1, 2, 3, 4, 5, 6, 7}
	hfVec := make([]float32, 8)
	for i := range hfVec {
		hfVec[i] = vec[rotateHalfFrom(i, 4)]
	}
	for _, c := range []struct {
		w    Weight
		want []float32
		dt   accel.DType
	}{
		{Weight{Name: "m", Type: gguf.F32, Rows: rows, Cols: cols, Data: f32Bytes(hf), RotateHalf: true}, inter, accel.F32},
		{Weight{Name: "m", Type: gguf.F32, Rows: rows, Cols: cols, Data: f32Bytes(hf), RotateHalf: true}, inter, accel.BF16},
		{Weight{Name: "v", Type: gguf.F32, Rows: 1, Cols: 8, Data: f32Bytes(hfVec), RotateHalf: true}, vec, accel.F32},
		{Weight{Name: "p", Type: gguf.F32, Rows: rows, Cols: cols, Data: f32Bytes(inter)}, inter, accel.F32},
	} {
		b, err := dev.Alloc(int64(c.w.Rows*c.w.Cols) * c.dt.Size())
		if err != nil {
			t.Fatal(err)
		}
		if err := u.upload(b, c.w, c.dt); err != nil {
			t.Fatal(err)
		}
		got, err := accel.Download(s, b)
		if err != nil {
			t.Fatal(err)
		}
		want := f32Bytes(c.want)
		if c.dt == accel.BF16 {
			want = BF16Bytes(c.want)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s as %v: got %v", c.w.Name, c.dt, got)
		}
		dev.Free(b)
	}
}

// rewrite copies a GGUF file into dir/name with edits: set replaces or adds
// metadata (a nil value drops the key), tensor edits or drops (nil) tensors.
func rewrite(t *testing.T, src, name string, set map[string]any, tensor func(gguf.Tensor, []byte) (gguf.Tensor, []byte, bool), extra map[string][]byte) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := gguf.NewWriter()
	for _, kv := range f.KVs {
		v, ok := set[kv.Key]
		switch {
		case !ok:
			must(t, w.Set(kv.Key, kv.Value))
		case v != nil:
			must(t, w.Set(kv.Key, v))
		}
	}
	for k, v := range set {
		if !f.Has(k) && v != nil {
			must(t, w.Set(k, v))
		}
	}
	for _, ti := range f.Tensors {
		d := f.Data(ti)
		keep := true
		if tensor != nil {
			ti, d, keep = tensor(ti, d)
		}
		if keep {
			must(t, w.AddTensor(ti.Name, ti.Type, ti.Shape, d))
		}
	}
	for n, d := range extra {
		must(t, w.AddTensor(n, gguf.F32, []int64{int64(len(d) / 4)}, d))
	}
	p := filepath.Join(t.TempDir(), name)
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(p, buf.Bytes(), 0o644))
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestGGUFErrors(t *testing.T) {
	dev := cpuDevice(t)
	src := fixtures + "stories260K.gguf"
	drop := func(name string) func(gguf.Tensor, []byte) (gguf.Tensor, []byte, bool) {
		return func(ti gguf.Tensor, d []byte) (gguf.Tensor, []byte, bool) { return ti, d, ti.Name != name }
	}
	for _, c := range []struct {
		name   string
		set    map[string]any
		tensor func(gguf.Tensor, []byte) (gguf.Tensor, []byte, bool)
		extra  map[string][]byte
		want   string
		is     error
	}{
		{"arch", map[string]any{"general.architecture": "gemma2"}, nil, nil, `general.architecture: architecture "gemma2" is not supported`, nil},
		{"softcap", map[string]any{"llama.attn_logit_softcapping": float32(50)}, nil, nil, `metadata "llama.attn_logit_softcapping"`, ErrNotImplemented},
		{"experts", map[string]any{"llama.expert_count": uint32(8)}, nil, nil, `metadata "llama.expert_count"`, ErrNotImplemented},
		{"rope scaling", map[string]any{"llama.rope.scaling.type": "yarn"}, nil, nil, "rope_scaling (type yarn", ErrNotImplemented},
		{"qwen2", map[string]any{"general.architecture": "qwen2", "qwen2.context_length": uint32(128), "qwen2.embedding_length": uint32(64),
			"qwen2.feed_forward_length": uint32(172), "qwen2.block_count": uint32(5), "qwen2.attention.head_count": uint32(8),
			"qwen2.attention.head_count_kv": uint32(4), "qwen2.attention.layer_norm_rms_epsilon": float32(1e-5)}, nil, nil, "no tensor blk.0.attn_q.bias", nil},
		{"partial rotary", map[string]any{"llama.rope.dimension_count": uint32(4)}, nil, nil, "partial rotary", ErrNotImplemented},
		{"no eps", map[string]any{"llama.attention.layer_norm_rms_epsilon": nil}, nil, nil, `"llama.attention.layer_norm_rms_epsilon": not found`, gguf.ErrNotFound},
		{"missing tensor", nil, drop("blk.4.ffn_up.weight"), nil, "no tensor blk.4.ffn_up", nil},
		{"shape", nil, func(ti gguf.Tensor, d []byte) (gguf.Tensor, []byte, bool) {
			if ti.Name == "blk.2.attn_k.weight" {
				ti.Shape = []int64{64, 16}
				d = d[:64*16*4]
			}
			return ti, d, true
		}, nil, `tensor "blk.2.attn_k.weight" of `, nil},
		{"quantized", nil, func(ti gguf.Tensor, d []byte) (gguf.Tensor, []byte, bool) {
			if ti.Name == "blk.0.attn_q.weight" {
				ti.Type, d = gguf.IQ4_NL, make([]byte, 64*2*18)
			}
			return ti, d, true
		}, nil, `"blk.0.attn_q.weight" of `, quant.ErrUnknownType},
		{"unexpected bias", nil, nil, map[string][]byte{"blk.1.attn_q.bias": make([]byte, 256)}, `"blk.1.attn_q.bias"`, nil},
		{"rope_freqs zero", nil, nil, map[string][]byte{"rope_freqs.weight": f32le(1, 0, 1, 1)}, `factor 1 is 0, want a finite positive number`, nil},
		{"rope_freqs NaN", nil, nil, map[string][]byte{"rope_freqs.weight": f32le(1, 1, float32(math.NaN()), 1)}, `factor 2 is NaN`, nil},
		{"rope_freqs and linear", map[string]any{"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": float32(4)}, nil,
			map[string][]byte{"rope_freqs.weight": f32le(1, 1, 1, 1)}, `"linear" beside rope_freqs.weight`, nil},
		{"unknown tensor", nil, nil, map[string][]byte{"blk.1.attn_output.bias": make([]byte, 256)}, `tensor "blk.1.attn_output.bias" (and 0 more) is not part of the llama architecture`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := rewrite(t, src, "bad.gguf", c.set, c.tensor, c.extra)
			m, _, err := Open(dev, Source{Model: p}, Options{})
			if err == nil {
				m.Close()
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.gguf") || (c.is != nil && !errors.Is(err, c.is)) {
				t.Fatalf("error %q, want one naming bad.gguf and containing %q", err, c.want)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.bin")
	must(t, os.WriteFile(junk, bytes.Repeat([]byte{7}, 100), 0o644))
	short := filepath.Join(dir, "short")
	must(t, os.WriteFile(short, []byte("GG"), 0o644))
	ck, err := os.ReadFile(fixtures + "r128.llama2c.bin")
	must(t, err)
	cut := filepath.Join(dir, "cut.bin")
	must(t, os.WriteFile(cut, ck[:len(ck)-4], 0o644))
	for _, c := range []struct {
		path, format, err string
	}{
		{fixtures + "stories260K.gguf", FormatGGUF, ""},
		{fixtures + "r128.llama2c.bin", FormatLlama2c, ""},
		{junk, "", "looked for the GGUF magic"},
		{short, "", "looked for the GGUF magic"},
		{cut, "", "a llama2.c checkpoint header that implies the file's"},
		{dir, "", "a directory without config.json"},
		{filepath.Join(dir, "none"), "", "no such file"},
		{"/dev/null", "", "not a regular file"},
	} {
		f, err := Detect(c.path)
		if f != c.format || (c.err == "" && err != nil) || (c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err))) {
			t.Errorf("Detect(%s) = %q, %v; want %q, %q", c.path, f, err, c.format, c.err)
		}
	}
	// A truncated GGUF is an error naming the file, from Open.
	g, err := os.ReadFile(fixtures + "stories260K.gguf")
	must(t, err)
	tg := filepath.Join(dir, "trunc.gguf")
	must(t, os.WriteFile(tg, g[:len(g)/2], 0o644))
	if _, err := OpenSource(Source{Model: tg}); err == nil || !strings.Contains(err.Error(), "trunc.gguf") || !errors.Is(err, gguf.ErrMalformed) {
		t.Errorf("truncated gguf: %v", err)
	}
}

func TestMaxSeq(t *testing.T) {
	l, err := OpenSource(Source{Model: fixtures + "stories260K.gguf"})
	must(t, err)
	if c := l.Weights.Config(); c.SeqLen != 128 || c.TrainedSeqLen != 128 || len(l.Warnings) != 0 || l.Name != "llama" {
		t.Fatalf("file's context: %+v %v %q", c, l.Warnings, l.Name)
	}
	l.Close()
	l, err = OpenSource(Source{Model: fixtures + "stories260K.gguf", MaxSeq: 512})
	must(t, err)
	defer l.Close()
	if c := l.Weights.Config(); c.SeqLen != 512 || len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], "declares 128") {
		t.Fatalf("raised context: %d %v", c.SeqLen, l.Warnings)
	}
}

// f32le is vs as little-endian float32 bytes.
func f32le(vs ...float32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}
