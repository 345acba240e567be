package llama2c_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/model/stories260k"
)

// defaultConfig is the header of the embedded stories260K checkpoint.
var defaultConfig = llama2c.Config{
	Dim: 64, Hidden: 172, Layers: 5, Heads: 8, KVHeads: 4, Vocab: 512, SeqLen: 512,
	SharedClassifier: true,
}

const defaultFileBytes = 1056540

func TestReadDefaultCheckpoint(t *testing.T) {
	c, err := llama2c.ReadCheckpoint(stories260k.Checkpoint())
	if err != nil {
		t.Fatal(err)
	}
	if c.Config != defaultConfig {
		t.Errorf("config = %+v, want %+v", c.Config, defaultConfig)
	}
	if got := c.Config.HeadSize(); got != 8 {
		t.Errorf("HeadSize = %d, want 8", got)
	}
	if got := c.Config.KVDim(); got != 32 {
		t.Errorf("KVDim = %d, want 32", got)
	}
	if got := c.Params(); got != 260032 {
		t.Errorf("Params = %d, want 260032", got)
	}
	if len(c.Layers) != 5 || len(c.TokenEmbedding) != 512*64 || len(c.RMSFinal) != 64 {
		t.Errorf("array sizes: %d layers, embedding %d, rms_final %d", len(c.Layers), len(c.TokenEmbedding), len(c.RMSFinal))
	}
	if len(c.Classifier) != len(c.TokenEmbedding) || &c.Classifier[0] != &c.TokenEmbedding[0] {
		t.Error("shared classifier is not the token embedding slice")
	}
	// The first embedding float is the first float after the header.
	data := stories260k.Checkpoint()
	if got, want := c.TokenEmbedding[0], float32frombytes(data[28:]); got != want {
		t.Errorf("TokenEmbedding[0] = %v, want %v", got, want)
	}
	// Arrays are capacity-limited windows: appending to one cannot clobber the next.
	if cap(c.Layers[0].RMSAtt) != len(c.Layers[0].RMSAtt) {
		t.Error("RMSAtt capacity exceeds its length")
	}
}

func float32frombytes(b []byte) float32 {
	var f float32
	if err := binary.Read(bytes.NewReader(b[:4]), binary.LittleEndian, &f); err != nil {
		panic(err)
	}
	return f
}

func TestReadCheckpointCopies(t *testing.T) {
	data := bytes.Clone(stories260k.Checkpoint())
	c, err := llama2c.ReadCheckpoint(data)
	if err != nil {
		t.Fatal(err)
	}
	before := c.TokenEmbedding[0]
	clear(data)
	if c.TokenEmbedding[0] != before {
		t.Error("checkpoint aliases its input data")
	}
}

func TestLoadCheckpoint(t *testing.T) {
	c, err := llama2c.LoadCheckpoint(filepath.Join("..", "stories260k", "stories260K.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Config != defaultConfig {
		t.Errorf("config = %+v", c.Config)
	}
	_, err = llama2c.LoadCheckpoint(filepath.Join(t.TempDir(), "missing.bin"))
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, llama2c.ErrMalformed) {
		t.Errorf("missing file: err = %v, want fs.ErrNotExist and not ErrMalformed", err)
	}
}

func TestWriteCheckpointRoundTrip(t *testing.T) {
	orig := stories260k.Checkpoint()
	c, err := llama2c.ReadCheckpoint(orig)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := llama2c.WriteCheckpoint(&buf, c); err != nil {
		t.Fatal(err)
	}
	out := buf.Bytes()
	if len(out) != defaultFileBytes {
		t.Fatalf("wrote %d bytes, want %d", len(out), defaultFileBytes)
	}
	// Identical to the original except the legacy RoPE tables, written as
	// zeros: 2 tables of [512][4] floats just before the end (the classifier
	// is shared, so nothing follows them).
	ropeBytes := 2 * 512 * 4 * 4
	ropeStart := len(out) - ropeBytes
	if !bytes.Equal(out[:ropeStart], orig[:ropeStart]) {
		t.Error("weights or header differ from the original file")
	}
	if !bytes.Equal(out[ropeStart:], make([]byte, ropeBytes)) {
		t.Error("legacy RoPE tables are not zero")
	}
	back, err := llama2c.ReadCheckpoint(out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Error("checkpoint changed in a write/read round trip")
	}
}

// syntheticCheckpoint returns a checkpoint of random weights.
func syntheticCheckpoint(cfg llama2c.Config, seed uint64) *llama2c.Checkpoint {
	rng := rand.New(rand.NewPCG(seed, 1))
	vec := func(n int, scale float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = (rng.Float32()*2 - 1) * scale
		}
		return v
	}
	ones := func(n int) []float32 {
		v := vec(n, 0.2)
		for i := range v {
			v[i]++
		}
		return v
	}
	dim, hid, kv := cfg.Dim, cfg.Hidden, cfg.KVDim()
	c := &llama2c.Checkpoint{
		Config:         cfg,
		TokenEmbedding: vec(cfg.Vocab*dim, 1),
		RMSFinal:       ones(dim),
	}
	for range cfg.Layers {
		c.Layers = append(c.Layers, llama2c.Layer{
			RMSAtt: ones(dim), WQ: vec(dim*dim, 0.3), WK: vec(kv*dim, 0.3),
			WV: vec(kv*dim, 0.3), WO: vec(dim*dim, 0.3), RMSFFN: ones(dim),
			W1: vec(hid*dim, 0.3), W2: vec(dim*hid, 0.3), W3: vec(hid*dim, 0.3),
		})
	}
	if cfg.SharedClassifier {
		c.Classifier = c.TokenEmbedding
	} else {
		c.Classifier = vec(cfg.Vocab*dim, 1)
	}
	return c
}

func TestUnsharedClassifierRoundTrip(t *testing.T) {
	cfg := llama2c.Config{Dim: 16, Hidden: 24, Layers: 2, Heads: 4, KVHeads: 2, Vocab: 300, SeqLen: 10}
	c := syntheticCheckpoint(cfg, 1)
	var buf bytes.Buffer
	if err := llama2c.WriteCheckpoint(&buf, c); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if v := int32(binary.LittleEndian.Uint32(data[20:])); v != -300 {
		t.Errorf("header vocab_size = %d, want -300", v)
	}
	wantParams := int64(300*16 + 2*(16+256+128+128+256+16+3*24*16) + 16 + 300*16)
	if got := c.Params(); got != wantParams {
		t.Errorf("Params = %d, want %d", got, wantParams)
	}
	ropeFloats := int64(2 * 10 * (4 / 2)) // two tables of [seq_len][head_size/2]
	if want := 28 + 4*(wantParams+ropeFloats); int64(len(data)) != want {
		t.Errorf("file is %d bytes, want %d", len(data), want)
	}
	back, err := llama2c.ReadCheckpoint(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Error("unshared checkpoint changed in a write/read round trip")
	}
	if &back.Classifier[0] == &back.TokenEmbedding[0] {
		t.Error("unshared classifier aliases the token embedding")
	}
}

func TestWriteCheckpointRejectsInconsistent(t *testing.T) {
	cfg := llama2c.Config{Dim: 8, Hidden: 12, Layers: 2, Heads: 2, KVHeads: 1, Vocab: 10, SeqLen: 4, SharedClassifier: true}
	for _, tc := range []struct {
		name string
		mod  func(c *llama2c.Checkpoint)
		msg  string
	}{
		{"short embedding", func(c *llama2c.Checkpoint) { c.TokenEmbedding = c.TokenEmbedding[1:] }, "token embedding has 79 floats, want 80"},
		{"missing layer", func(c *llama2c.Checkpoint) { c.Layers = c.Layers[:1] }, "1 layers, want 2"},
		{"bad wk", func(c *llama2c.Checkpoint) { c.Layers[1].WK = make([]float32, 64) }, "wk of layer 1 has 64 floats, want 32"},
		{"bad rms_final", func(c *llama2c.Checkpoint) { c.RMSFinal = nil }, "rms_final has 0 floats, want 8"},
		{"unshared without classifier", func(c *llama2c.Checkpoint) {
			c.Config.SharedClassifier = false
			c.Classifier = nil
		}, "classifier has 0 floats, want 80"},
		{"invalid config", func(c *llama2c.Checkpoint) { c.Config.Heads = 3 }, "not a multiple of n_heads=3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := syntheticCheckpoint(cfg, 2)
			tc.mod(c)
			var buf bytes.Buffer
			err := llama2c.WriteCheckpoint(&buf, c)
			if !errors.Is(err, llama2c.ErrMalformed) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, want ErrMalformed mentioning %q", err, tc.msg)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes despite the error", buf.Len())
			}
		})
	}
}

func TestReadCheckpointTruncated(t *testing.T) {
	data := stories260k.Checkpoint()
	const emb = 28 + 4*512*64 // end of the token embedding
	for _, tc := range []struct {
		n     int
		where string
	}{
		{0, "header needs 28 bytes, have 0"},
		{1, "header needs 28 bytes, have 1"},
		{20, "header needs 28 bytes, have 20"},
		{27, "header needs 28 bytes, have 27"},
		{28, "have 28 (the data ends inside token embedding)"},
		{1000, "have 1000 (the data ends inside token embedding)"},
		{emb, "inside rms_att of layer 0"},
		{emb + 4*5*64 + 4*4096*2 + 3, "inside wq of layer 2"},
		{defaultFileBytes / 2, "inside w1 of layer"},
		{defaultFileBytes - 4*4096 - 4*64, "inside rms_final"},
		{defaultFileBytes - 4, "inside legacy RoPE table freq_cis_imag"},
		{defaultFileBytes - 1, "inside legacy RoPE table freq_cis_imag"},
	} {
		err := readErr(data[:tc.n])
		if err == nil || !strings.Contains(err.Error(), "checkpoint truncated") || !strings.Contains(err.Error(), tc.where) {
			t.Errorf("truncated at %d: err = %v, want a truncation error mentioning %q", tc.n, err, tc.where)
		}
	}
	want := "llama2c: checkpoint truncated: want 1056540 bytes for dim=64 hidden=172 layers=5 heads=8 kv_heads=4 vocab=512 seq_len=512 shared, have 1000 (the data ends inside token embedding)"
	if err := readErr(data[:1000]); err.Error() != want {
		t.Errorf("message:\n got %q\nwant %q", err, want)
	}
}

// readErr reads data as a checkpoint and returns the error, which must wrap
// ErrMalformed when it is not nil.
func readErr(data []byte) error {
	c, err := llama2c.ReadCheckpoint(data)
	if err == nil {
		return nil
	}
	if c != nil {
		panic("ReadCheckpoint returned a checkpoint with an error")
	}
	if !errors.Is(err, llama2c.ErrMalformed) {
		panic("error does not wrap ErrMalformed: " + err.Error())
	}
	return err
}

func TestReadCheckpointTrailing(t *testing.T) {
	for _, extra := range []int{1, 3, 4, 4096} {
		data := append(bytes.Clone(stories260k.Checkpoint()), make([]byte, extra)...)
		err := readErr(data)
		if err == nil || !strings.Contains(err.Error(), "trailing bytes") {
			t.Errorf("%d extra bytes: err = %v, want a trailing-bytes error", extra, err)
		}
	}
}

func TestReadCheckpointBadHeader(t *testing.T) {
	// Field indices in the header.
	const (
		dim = iota
		hidden
		layers
		heads
		kvHeads
		vocab
		seqLen
	)
	for _, tc := range []struct {
		name string
		set  map[int]int32
		msg  string
	}{
		{"zero dim", map[int]int32{dim: 0}, "dim=0 must be positive"},
		{"negative dim", map[int]int32{dim: -64}, "dim=-64 must be positive"},
		{"zero hidden", map[int]int32{hidden: 0}, "hidden_dim=0 must be positive"},
		{"negative layers", map[int]int32{layers: -1}, "n_layers=-1 must be positive"},
		{"zero heads", map[int]int32{heads: 0}, "n_heads=0 must be positive"},
		{"zero kv heads", map[int]int32{kvHeads: 0}, "n_kv_heads=0 must be positive"},
		{"zero vocab", map[int]int32{vocab: 0}, "vocab_size=0 must be positive"},
		{"zero seq_len", map[int]int32{seqLen: 0}, "seq_len=0 must be positive"},
		{"negative seq_len", map[int]int32{seqLen: -5}, "seq_len=-5 must be positive"},
		{"dim not multiple of heads", map[int]int32{heads: 7}, "dim=64 is not a multiple of n_heads=7"},
		{"heads not multiple of kv heads", map[int]int32{kvHeads: 3}, "n_heads=8 is not a multiple of n_kv_heads=3"},
		{"kv heads above heads", map[int]int32{kvHeads: 16}, "n_heads=8 is not a multiple of n_kv_heads=16"},
		{"odd head size", map[int]int32{dim: 48, heads: 16, kvHeads: 16}, "head size dim/n_heads=3 is odd"},
		{"huge dim", map[int]int32{dim: 1 << 21}, "dim=2097152 exceeds the limit"},
		{"min int32 vocab", map[int]int32{vocab: -1 << 31}, "vocab_size=2147483648 exceeds the limit"},
		{"too many params", map[int]int32{dim: 1 << 20, heads: 1 << 10, kvHeads: 1 << 10, hidden: 1 << 20},
			"more than the limit"},
		{"hidden too large for the data", map[int]int32{hidden: 173}, "checkpoint truncated"},
		{"hidden too small for the data", map[int]int32{hidden: 171}, "3840 trailing bytes"},
		{"unshared flag makes it short", map[int]int32{vocab: -512}, "checkpoint truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := bytes.Clone(stories260k.Checkpoint())
			for i, v := range tc.set {
				binary.LittleEndian.PutUint32(data[4*i:], uint32(v))
			}
			err := readErr(data)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.msg)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	ok := llama2c.Config{Dim: 8, Hidden: 12, Layers: 1, Heads: 2, KVHeads: 1, Vocab: 10, SeqLen: 4}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	if err := defaultConfig.Validate(); err != nil {
		t.Fatalf("default config rejected: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*llama2c.Config)
	}{
		{"zero dim", func(c *llama2c.Config) { c.Dim = 0 }},
		{"odd head size", func(c *llama2c.Config) { c.Dim, c.Heads, c.KVHeads = 6, 2, 2 }},
		{"kv heads do not divide", func(c *llama2c.Config) { c.Heads, c.KVHeads = 4, 3 }},
		{"huge layers", func(c *llama2c.Config) { c.Layers = 1<<20 + 1 }},
		{"huge total", func(c *llama2c.Config) { c.Dim, c.Heads, c.KVHeads, c.Layers, c.Hidden = 1<<20, 2, 2, 1<<20, 1<<20 }},
	} {
		c := ok
		tc.mod(&c)
		if err := c.Validate(); !errors.Is(err, llama2c.ErrMalformed) {
			t.Errorf("%s: Validate(%v) = %v, want ErrMalformed", tc.name, c, err)
		}
	}
}

// FuzzReadCheckpoint checks that ReadCheckpoint never panics and that what it
// accepts survives a write/read round trip.
func FuzzReadCheckpoint(f *testing.F) {
	for i, cfg := range []llama2c.Config{
		{Dim: 4, Hidden: 6, Layers: 1, Heads: 2, KVHeads: 1, Vocab: 5, SeqLen: 3, SharedClassifier: true},
		{Dim: 4, Hidden: 3, Layers: 2, Heads: 1, KVHeads: 1, Vocab: 2, SeqLen: 2},
	} {
		var buf bytes.Buffer
		if err := llama2c.WriteCheckpoint(&buf, syntheticCheckpoint(cfg, uint64(i))); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := llama2c.ReadCheckpoint(data)
		if err != nil {
			if !errors.Is(err, llama2c.ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		var buf bytes.Buffer
		if err := llama2c.WriteCheckpoint(&buf, c); err != nil {
			t.Fatal(err)
		}
		if buf.Len() != len(data) {
			t.Fatalf("rewrote %d bytes, read %d", buf.Len(), len(data))
		}
		back, err := llama2c.ReadCheckpoint(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if c.Params() != back.Params() || c.Config != back.Config {
			t.Fatal("round trip changed the checkpoint")
		}
	})
}
