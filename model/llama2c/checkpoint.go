package llama2c

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Layer holds the weights of one transformer layer. Matrices are row-major
// out x in, so y = W x reads row i of W to produce y[i].
type Layer struct {
	RMSAtt []float32 // [dim] attention RMSNorm weight
	WQ     []float32 // [dim][dim] query projection
	WK     []float32 // [kv_dim][dim] key projection
	WV     []float32 // [kv_dim][dim] value projection
	WO     []float32 // [dim][dim] attention output projection
	RMSFFN []float32 // [dim] feed-forward RMSNorm weight
	W1     []float32 // [hidden][dim] gate projection (through SiLU)
	W2     []float32 // [dim][hidden] down projection
	W3     []float32 // [hidden][dim] up projection
}

// Checkpoint is a llama2.c "version 0" model: its Config and its weights.
type Checkpoint struct {
	Config         Config
	TokenEmbedding []float32 // [vocab][dim]
	Layers         []Layer   // Config.Layers entries
	RMSFinal       []float32 // [dim] final RMSNorm weight
	// Classifier is the output matrix [vocab][dim]. When
	// Config.SharedClassifier is true it is the same slice as TokenEmbedding
	// (ReadCheckpoint sets it so; WriteCheckpoint does not write it).
	Classifier []float32
}

// Params returns the number of distinct float parameters of the model: the
// weight arrays of the file, without the legacy RoPE tables, counting a shared
// classifier once. For stories260K it is 260032.
func (c *Checkpoint) Params() int64 { return c.Config.params() }

// ReadCheckpoint parses a llama2.c "version 0" checkpoint. The floats are
// copied out of data, which the Checkpoint does not retain. The data must be
// exactly as long as the header implies: a truncated file or trailing bytes
// are an error wrapping ErrMalformed, as is an invalid header (see
// Config.Validate). The legacy RoPE tables are skipped.
func ReadCheckpoint(data []byte) (*Checkpoint, error) {
	if len(data) < headerBytes {
		return nil, malformed("checkpoint truncated: the header needs %d bytes, have %d", headerBytes, len(data))
	}
	var h [7]int
	for i := range h {
		h[i] = int(int32(binary.LittleEndian.Uint32(data[4*i:])))
	}
	cfg := Config{
		Dim: h[0], Hidden: h[1], Layers: h[2], Heads: h[3], KVHeads: h[4],
		Vocab: h[5], SeqLen: h[6], SharedClassifier: h[5] > 0,
	}
	if cfg.Vocab < 0 {
		if v := -int64(h[5]); v > maxDim { // also avoids overflowing a 32-bit int
			return nil, malformed("invalid config (%v): vocab_size=%d exceeds the limit %d", cfg, v, maxDim)
		}
		cfg.Vocab = -cfg.Vocab
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	want := cfg.fileBytes()
	have := int64(len(data))
	if have < want {
		return nil, malformed("checkpoint truncated: want %d bytes for %v, have %d (the data ends inside %s)",
			want, cfg, have, cfg.locate(have))
	}
	if have > want {
		return nil, malformed("checkpoint has %d trailing bytes: want %d bytes for %v, have %d",
			have-want, want, cfg, have)
	}

	// One allocation for all parameters; each array is a capacity-limited
	// window into it so that appending to one never clobbers another.
	all := make([]float32, cfg.params())
	off := 0
	take := func(n int) []float32 {
		s := all[off : off+n : off+n]
		off += n
		return s
	}
	r := floatReader{data: data[headerBytes:]}
	dim, hidden, kvDim, layers := cfg.Dim, cfg.Hidden, cfg.KVDim(), cfg.Layers
	c := &Checkpoint{Config: cfg, Layers: make([]Layer, layers)}
	c.TokenEmbedding = r.read(take(cfg.Vocab * dim))
	fields := []struct {
		n   int
		get func(*Layer) *[]float32
	}{
		{dim, func(l *Layer) *[]float32 { return &l.RMSAtt }},
		{dim * dim, func(l *Layer) *[]float32 { return &l.WQ }},
		{kvDim * dim, func(l *Layer) *[]float32 { return &l.WK }},
		{kvDim * dim, func(l *Layer) *[]float32 { return &l.WV }},
		{dim * dim, func(l *Layer) *[]float32 { return &l.WO }},
		{dim, func(l *Layer) *[]float32 { return &l.RMSFFN }},
		{hidden * dim, func(l *Layer) *[]float32 { return &l.W1 }},
		{dim * hidden, func(l *Layer) *[]float32 { return &l.W2 }},
		{hidden * dim, func(l *Layer) *[]float32 { return &l.W3 }},
	}
	for _, f := range fields {
		for l := range c.Layers {
			*f.get(&c.Layers[l]) = r.read(take(f.n))
		}
	}
	c.RMSFinal = r.read(take(dim))
	r.skip(cfg.SeqLen * cfg.HeadSize()) // two tables of [seq_len][head_size/2]
	if cfg.SharedClassifier {
		c.Classifier = c.TokenEmbedding
	} else {
		c.Classifier = r.read(take(cfg.Vocab * dim))
	}
	return c, nil
}

// locate names the array of the file that contains byte offset off (which
// is at least headerBytes and less than the file size), e.g. "wq of layer 2".
func (c Config) locate(off int64) string {
	pos := (off - headerBytes) / 4
	for _, s := range c.sections() {
		n := satMul(s.layers, s.floats)
		if pos < n {
			if s.layers > 1 {
				return fmt.Sprintf("%s of layer %d", s.name, pos/s.floats)
			}
			return s.name
		}
		pos -= n
	}
	return "the end of the file"
}

// floatReader decodes consecutive little-endian float32 values.
type floatReader struct{ data []byte }

// read fills dst from the data and returns it.
func (r *floatReader) read(dst []float32) []float32 {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(r.data[4*i:]))
	}
	r.data = r.data[4*len(dst):]
	return dst
}

// skip discards n floats.
func (r *floatReader) skip(n int) { r.data = r.data[4*n:] }

// LoadCheckpoint reads and parses the checkpoint file at path (see
// ReadCheckpoint).
func LoadCheckpoint(path string) (*Checkpoint, error) {
	data, err := readBounded(path, "checkpoint", headerBytes, HeaderFileSize)
	if err != nil {
		return nil, err
	}
	c, err := ReadCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return c, nil
}

// check verifies that every array of c has the length its Config implies.
// The error wraps ErrMalformed.
func (c *Checkpoint) check() error {
	cfg := c.Config
	if err := cfg.Validate(); err != nil {
		return err
	}
	dim, hidden, kvDim := cfg.Dim, cfg.Hidden, cfg.KVDim()
	bad := func(name string, got, want int) error {
		return malformed("checkpoint (%v): %s has %d floats, want %d", cfg, name, got, want)
	}
	if len(c.TokenEmbedding) != cfg.Vocab*dim {
		return bad("token embedding", len(c.TokenEmbedding), cfg.Vocab*dim)
	}
	if len(c.Layers) != cfg.Layers {
		return malformed("checkpoint (%v): %d layers, want %d", cfg, len(c.Layers), cfg.Layers)
	}
	for l, ly := range c.Layers {
		for _, f := range []struct {
			name string
			s    []float32
			n    int
		}{
			{"rms_att", ly.RMSAtt, dim}, {"wq", ly.WQ, dim * dim},
			{"wk", ly.WK, kvDim * dim}, {"wv", ly.WV, kvDim * dim},
			{"wo", ly.WO, dim * dim}, {"rms_ffn", ly.RMSFFN, dim},
			{"w1", ly.W1, hidden * dim}, {"w2", ly.W2, dim * hidden},
			{"w3", ly.W3, hidden * dim},
		} {
			if len(f.s) != f.n {
				return bad(fmt.Sprintf("%s of layer %d", f.name, l), len(f.s), f.n)
			}
		}
	}
	if len(c.RMSFinal) != dim {
		return bad("rms_final", len(c.RMSFinal), dim)
	}
	if !cfg.SharedClassifier && len(c.Classifier) != cfg.Vocab*dim {
		return bad("classifier", len(c.Classifier), cfg.Vocab*dim)
	}
	return nil
}

// classifier returns the output matrix: TokenEmbedding when shared.
func (c *Checkpoint) classifier() []float32 {
	if c.Config.SharedClassifier {
		return c.TokenEmbedding
	}
	return c.Classifier
}

// WriteCheckpoint writes c in the llama2.c "version 0" format that
// ReadCheckpoint reads: the header (vocab_size negated when the classifier is
// not shared), the weights, the two legacy RoPE tables as zeros, and the
// classifier only when it is not shared. It returns an error wrapping
// ErrMalformed, having written nothing, when an array's length disagrees with
// c.Config.
func WriteCheckpoint(w io.Writer, c *Checkpoint) error {
	if err := c.check(); err != nil {
		return err
	}
	cfg := c.Config
	bw := bufio.NewWriterSize(w, 1<<16)
	vocab := int32(cfg.Vocab)
	if !cfg.SharedClassifier {
		vocab = -vocab
	}
	var hdr [headerBytes]byte
	for i, v := range []int32{int32(cfg.Dim), int32(cfg.Hidden), int32(cfg.Layers),
		int32(cfg.Heads), int32(cfg.KVHeads), vocab, int32(cfg.SeqLen)} {
		binary.LittleEndian.PutUint32(hdr[4*i:], uint32(v))
	}
	if _, err := bw.Write(hdr[:]); err != nil {
		return err
	}
	var buf [4]byte
	put := func(s []float32) error {
		for _, v := range s {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(v))
			if _, err := bw.Write(buf[:]); err != nil {
				return err
			}
		}
		return nil
	}
	arrays := [][]float32{c.TokenEmbedding}
	for _, get := range []func(*Layer) []float32{
		func(l *Layer) []float32 { return l.RMSAtt },
		func(l *Layer) []float32 { return l.WQ },
		func(l *Layer) []float32 { return l.WK },
		func(l *Layer) []float32 { return l.WV },
		func(l *Layer) []float32 { return l.WO },
		func(l *Layer) []float32 { return l.RMSFFN },
		func(l *Layer) []float32 { return l.W1 },
		func(l *Layer) []float32 { return l.W2 },
		func(l *Layer) []float32 { return l.W3 },
	} {
		for l := range c.Layers {
			arrays = append(arrays, get(&c.Layers[l]))
		}
	}
	arrays = append(arrays, c.RMSFinal, make([]float32, cfg.SeqLen*cfg.HeadSize()))
	if !cfg.SharedClassifier {
		arrays = append(arrays, c.Classifier)
	}
	for _, a := range arrays {
		if err := put(a); err != nil {
			return err
		}
	}
	return bw.Flush()
}
