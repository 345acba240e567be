package llama

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/model/llama2c"
)

// Roles of the tensors a decoder is built from, named as GGUF names them
// (a layer's role is prefixed "blk.N." in GGUF files).
const (
	RoleEmbedding  = "token_embd"
	RoleOutputNorm = "output_norm"
	RoleOutput     = "output" // absent when the embeddings are tied
	RoleAttnNorm   = "attn_norm"
	RoleQ          = "attn_q"
	RoleK          = "attn_k"
	RoleV          = "attn_v"
	RoleO          = "attn_output"
	RoleQBias      = "attn_q.bias"
	RoleKBias      = "attn_k.bias"
	RoleVBias      = "attn_v.bias"
	RoleQNorm      = "attn_q_norm"
	RoleKNorm      = "attn_k_norm"
	RoleFFNNorm    = "ffn_norm"
	RoleGate       = "ffn_gate"
	RoleDown       = "ffn_down"
	RoleUp         = "ffn_up"
)

// Weight is one tensor as a file holds it.
type Weight struct {
	// Name is the file's own name for it, File the file: errors cite both.
	Name, File string
	// Type is the element type, with ggml's type ids (F32, F16, BF16 and
	// the quantized block types).
	Type gguf.GGMLType
	// Rows × Cols, row-major (out × in for a matrix; 1 × n for a vector).
	Rows, Cols int
	// Data is the encoded bytes, usually a slice of the file's mapping.
	Data []byte
	// RotateHalf: the rows of each head are in the rotate-half order of
	// Hugging Face's RoPE (pair j is rows j and j+HeadDim/2) rather than the
	// interleaved pairs (2j, 2j+1) the RoPE kernel uses; the loader
	// permutes them. Set on q and k projections, their biases and q/k norm
	// weights.
	RotateHalf bool
}

// setShape sets w's Rows and Cols from a file's shape of a vector (one
// row) or a matrix. outerFirst: the shape lists the outermost axis first
// (PyTorch's order, safetensors), not the contiguous one (ggml's ne, GGUF).
func (w *Weight) setShape(shape []int64, outerFirst bool) error {
	switch {
	case len(shape) == 1:
		w.Rows, w.Cols = 1, int(shape[0])
	case len(shape) == 2 && outerFirst:
		w.Rows, w.Cols = int(shape[0]), int(shape[1])
	case len(shape) == 2:
		w.Rows, w.Cols = int(shape[1]), int(shape[0])
	default:
		return fmt.Errorf("llama: %s: shape %v, want a matrix or a vector", where(*w), shape)
	}
	return nil
}

// rotary reports whether a role's rows are a head's RoPE pairs (q and k,
// their biases and norms): those a file may keep in rotate-half order
// (Weight.RotateHalf).
func rotary(role string) bool {
	switch role {
	case RoleQ, RoleK, RoleQBias, RoleKBias, RoleQNorm, RoleKNorm:
		return true
	}
	return false
}

// Weights is a source of a model's tensors by role: a llama2.c checkpoint,
// a GGUF file or a Hugging Face directory.
type Weights interface {
	// Path is the file or directory, for errors.
	Path() string
	// Config is the model's shape and maths.
	Config() Config
	// Weight returns a role's tensor (layer -1 for global ones); ok is
	// false when the file has none (a tied classifier, absent biases).
	Weight(role string, layer int) (w Weight, ok bool, err error)
	// Done says the loader has uploaded a weight: a mapped source may drop
	// its pages from memory.
	Done(w Weight)
	// Close releases the source (its mappings).
	Close() error
}

// Retainer is implemented by a Weights whose tensors' bytes can outlive
// it: the pages of a memory-mapped file. Retain keeps w.Data valid and
// unchanged past Close until release is called, with its pages read in
// now; the loader uses it to let a device that reads host memory in place
// (accel.HostAliaser) keep a weight the file stores exactly as the device
// would, instead of a copy. ok is false where it cannot; then the weight is
// uploaded.
type Retainer interface {
	Retain(w Weight) (release func(), ok bool)
}

// checkpointWeights serves a llama2.c checkpoint's float32 arrays.
type checkpointWeights struct {
	ck  *llama2c.Checkpoint
	cfg Config
}

// CheckpointWeights is the Weights of a llama2.c checkpoint.
func CheckpointWeights(ck *llama2c.Checkpoint) Weights {
	return &checkpointWeights{ck: ck, cfg: FromLlama2c(ck.Config)}
}

func (c *checkpointWeights) Config() Config { return c.cfg }
func (c *checkpointWeights) Path() string   { return "llama2.c checkpoint" }
func (c *checkpointWeights) Done(Weight)    {}
func (c *checkpointWeights) Close() error   { return nil }

func (c *checkpointWeights) Weight(role string, layer int) (Weight, bool, error) {
	cfg := c.cfg
	d, h, kv := cfg.Dim, cfg.Hidden, cfg.KVDim()
	var v []float32
	rows, cols := 1, d
	switch role {
	case RoleEmbedding:
		v, rows = c.ck.TokenEmbedding, cfg.Vocab
	case RoleOutputNorm:
		v = c.ck.RMSFinal
	case RoleOutput:
		if cfg.TiedEmbeddings {
			return Weight{}, false, nil
		}
		v, rows = c.ck.Classifier, cfg.Vocab
	default:
		if layer < 0 || layer >= len(c.ck.Layers) {
			return Weight{}, false, fmt.Errorf("llama: no layer %d", layer)
		}
		L := &c.ck.Layers[layer]
		switch role {
		case RoleAttnNorm:
			v = L.RMSAtt
		case RoleQ:
			v, rows = L.WQ, d
		case RoleK:
			v, rows = L.WK, kv
		case RoleV:
			v, rows = L.WV, kv
		case RoleO:
			v, rows = L.WO, d
		case RoleFFNNorm:
			v = L.RMSFFN
		case RoleGate:
			v, rows = L.W1, h
		case RoleDown:
			v, rows, cols = L.W2, d, h
		case RoleUp:
			v, rows = L.W3, h
		default:
			return Weight{}, false, nil
		}
	}
	return Weight{Name: role, File: "llama2.c checkpoint", Type: gguf.F32, Rows: rows, Cols: cols, Data: f32Bytes(v)}, true, nil
}

// f32Bytes encodes float32s little-endian.
func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
