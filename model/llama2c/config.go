package llama2c

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrMalformed is wrapped by every error that reports malformed checkpoint or
// tokenizer data (including an invalid Config); test with errors.Is.
var ErrMalformed = errors.New("llama2c: malformed data")

// formatError is a malformed-data error: its message is self-contained (it
// does not repeat ErrMalformed's text) and it unwraps to ErrMalformed.
type formatError struct{ msg string }

func (e *formatError) Error() string { return e.msg }
func (e *formatError) Unwrap() error { return ErrMalformed }

// malformed returns a formatError with a message prefixed by "llama2c: ".
func malformed(format string, args ...any) error {
	return &formatError{msg: "llama2c: " + fmt.Sprintf(format, args...)}
}

const (
	// maxDim bounds every individual dimension of a Config.
	maxDim = 1 << 20
	// maxParams bounds the number of float32 values a checkpoint may hold
	// (weights plus the legacy RoPE tables): 1<<32 floats is 16 GiB. On
	// 32-bit platforms the bound is lower, so that every size fits an int.
	maxParams = min(1<<32, math.MaxInt>>3)
)

// Config is the hyperparameter header of a llama2.c checkpoint.
type Config struct {
	Dim     int // model (residual stream) width
	Hidden  int // width of the feed-forward hidden layer
	Layers  int // number of transformer layers
	Heads   int // number of query heads
	KVHeads int // number of key/value heads (grouped-query attention)
	Vocab   int // vocabulary size (always positive here; see SharedClassifier)
	SeqLen  int // maximum sequence length (positions 0..SeqLen-1)
	// SharedClassifier reports whether the output classifier is the token
	// embedding matrix (a positive vocab_size in the file header) rather than
	// a separate matrix stored after the weights (a negative vocab_size).
	SharedClassifier bool
}

// HeadSize returns the width of one attention head, Dim/Heads.
func (c Config) HeadSize() int { return c.Dim / c.Heads }

// kvCacheFloats returns the size of a full key/value cache, saturating.
func (c Config) kvCacheFloats() int64 {
	return satMul(2, satMul(int64(c.Layers), satMul(int64(c.SeqLen), int64(c.KVDim()))))
}

// KVDim returns the total width of the keys (and of the values),
// Dim*KVHeads/Heads.
func (c Config) KVDim() int { return c.Dim * c.KVHeads / c.Heads }

// String formats the configuration the way error messages show it, e.g.
// "dim=64 hidden=172 layers=5 heads=8 kv_heads=4 vocab=512 seq_len=512 shared".
func (c Config) String() string {
	cls := "shared"
	if !c.SharedClassifier {
		cls = "unshared"
	}
	return fmt.Sprintf("dim=%d hidden=%d layers=%d heads=%d kv_heads=%d vocab=%d seq_len=%d %s",
		c.Dim, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.Vocab, c.SeqLen, cls)
}

// Validate reports whether c describes a usable model: every dimension
// positive and at most 1<<20, Dim divisible by Heads, Heads divisible by
// KVHeads, an even head size (RoPE rotates pairs), and at most 1<<32 floats in
// the whole file. The error wraps ErrMalformed and names the offending field.
func (c Config) Validate() error {
	fields := []struct {
		name string
		v    int
	}{
		{"dim", c.Dim}, {"hidden_dim", c.Hidden}, {"n_layers", c.Layers},
		{"n_heads", c.Heads}, {"n_kv_heads", c.KVHeads}, {"vocab_size", c.Vocab},
		{"seq_len", c.SeqLen},
	}
	for _, f := range fields {
		if f.v <= 0 {
			return malformed("invalid config (%v): %s=%d must be positive", c, f.name, f.v)
		}
		if f.v > maxDim {
			return malformed("invalid config (%v): %s=%d exceeds the limit %d", c, f.name, f.v, maxDim)
		}
	}
	if c.Dim%c.Heads != 0 {
		return malformed("invalid config (%v): dim=%d is not a multiple of n_heads=%d", c, c.Dim, c.Heads)
	}
	if c.Heads%c.KVHeads != 0 {
		return malformed("invalid config (%v): n_heads=%d is not a multiple of n_kv_heads=%d", c, c.Heads, c.KVHeads)
	}
	if c.HeadSize()%2 != 0 {
		return malformed("invalid config (%v): head size dim/n_heads=%d is odd; RoPE needs an even head size", c, c.HeadSize())
	}
	if n := c.fileFloats(); n > maxParams {
		return malformed("invalid config (%v): the checkpoint would hold %d floats, more than the limit %d", c, n, int64(maxParams))
	}
	return nil
}

// satMul and satAdd are int64 arithmetic that saturates at math.MaxInt64
// instead of overflowing (all operands are non-negative).
func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// section is one float32 array of the checkpoint file, in file order.
type section struct {
	name   string
	layers int64 // number of per-layer copies (1 for global arrays)
	floats int64 // floats per copy
	rope   bool  // a legacy RoPE table: in the file, but not a parameter
}

// sections lists the arrays of the checkpoint file in order, assuming the
// dimensions are positive (they need not be otherwise valid).
func (c Config) sections() []section {
	dim, hidden, layers := int64(c.Dim), int64(c.Hidden), int64(c.Layers)
	kvDim := int64(0)
	headSize := int64(0)
	if c.Heads > 0 {
		kvDim = satMul(dim, int64(c.KVHeads)) / int64(c.Heads)
		headSize = dim / int64(c.Heads)
	}
	vocab, seq := int64(c.Vocab), int64(c.SeqLen)
	s := []section{
		{"token embedding", 1, satMul(vocab, dim), false},
		{"rms_att", layers, dim, false},
		{"wq", layers, satMul(dim, dim), false},
		{"wk", layers, satMul(kvDim, dim), false},
		{"wv", layers, satMul(kvDim, dim), false},
		{"wo", layers, satMul(dim, dim), false},
		{"rms_ffn", layers, dim, false},
		{"w1", layers, satMul(hidden, dim), false},
		{"w2", layers, satMul(dim, hidden), false},
		{"w3", layers, satMul(hidden, dim), false},
		{"rms_final", 1, dim, false},
		{"legacy RoPE table freq_cis_real", 1, satMul(seq, headSize/2), true},
		{"legacy RoPE table freq_cis_imag", 1, satMul(seq, headSize/2), true},
	}
	if !c.SharedClassifier {
		s = append(s, section{"classifier", 1, satMul(vocab, dim), false})
	}
	return s
}

// fileFloats returns the number of float32 values in the checkpoint file,
// saturating at math.MaxInt64.
func (c Config) fileFloats() int64 {
	var n int64
	for _, s := range c.sections() {
		n = satAdd(n, satMul(s.layers, s.floats))
	}
	return n
}

// params returns the number of distinct weight floats (the file's floats
// without the legacy RoPE tables).
func (c Config) params() int64 {
	var n int64
	for _, s := range c.sections() {
		if !s.rope {
			n = satAdd(n, satMul(s.layers, s.floats))
		}
	}
	return n
}

// headerBytes is the size of the checkpoint header: 7 int32.
const headerBytes = 7 * 4

// fileBytes returns the exact size in bytes of a checkpoint with this config.
func (c Config) fileBytes() int64 {
	return satAdd(headerBytes, satMul(4, c.fileFloats()))
}

// HeaderFileSize returns the size a checkpoint file must have for the 28-byte
// header hdr, and whether the header is a valid configuration at all: a
// format detector calls it to tell a llama2.c checkpoint from other files.
func HeaderFileSize(hdr []byte) (int64, bool) {
	if len(hdr) < headerBytes {
		return 0, false
	}
	var h [7]int64
	for i := range h {
		h[i] = int64(int32(binary.LittleEndian.Uint32(hdr[4*i:])))
	}
	cfg := Config{Dim: int(h[0]), Hidden: int(h[1]), Layers: int(h[2]), Heads: int(h[3]), KVHeads: int(h[4]),
		Vocab: int(h[5]), SeqLen: int(h[6]), SharedClassifier: h[5] > 0}
	if h[5] < 0 {
		cfg.Vocab = int(-h[5])
	}
	if cfg.Validate() != nil {
		return 0, false
	}
	return cfg.fileBytes(), true
}
