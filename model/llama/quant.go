package llama

import (
	"encoding/binary"
	"fmt"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/quant"
)

// weightPlan is the storage of each kind of matrix for a --weights choice,
// following llama-quantize for that type (llama.cpp's
// llama_tensor_get_type, no importance matrix): the matrices of every
// block get the type; the classifier gets Q6_K (Q8_0 stays Q8_0); the
// token embedding is quantized with the type too, and kept as its
// dequantised float32 values (it is gathered, and ggml gathers the
// dequantised rows). A row length that is not whole blocks of the type
// falls back as llama-quantize does: Q6_K to Q8_0, Q4_K to Q4_0 (where
// llama.cpp takes Q5_0, which reprise would run only as Q8_0), and to
// float32 where not even 32 divides the row.
//
// Whatever the plan, a matrix the file already stores as Q8_0, Q4_0, Q4_K
// or Q6_K is used as it is, a Q5_0 one as the Q8_0 of the same values
// (q5ToQ8); other quantized types are dequantised into the plan's storage
// (dequantised lists them, for the start-up message).
type weightPlan struct {
	mat         accel.DType // the matrices' storage
	out         accel.DType // the classifier's
	emb         accel.DType // the embedding's round trip; 0: none
	dequantised *[]string
}

func quantPlan(cfg Config, wdt accel.DType) weightPlan {
	p := weightPlan{mat: wdt, out: wdt, dequantised: new([]string)}
	switch wdt {
	case accel.Q8_0:
		p.emb = fit(wdt, cfg.Dim)
	case accel.Q4_0, accel.Q4_K:
		p.out, p.emb = accel.Q6_K, fit(wdt, cfg.Dim)
	}
	return p
}

// fit is dt for rows of cols elements, or its fallback.
func fit(dt accel.DType, cols int) accel.DType {
	for dt.BlockSize() > 1 && cols%dt.BlockSize() != 0 {
		switch dt {
		case accel.Q4_K:
			dt = accel.Q4_0
		case accel.Q6_K:
			dt = accel.Q8_0
		default:
			return accel.F32
		}
	}
	return dt
}

// of is the storage of a matrix with rows of cols.
func (p weightPlan) of(cols int) accel.DType { return fit(p.mat, cols) }

// output is the classifier's.
func (p weightPlan) output(cols int) accel.DType { return fit(p.out, cols) }

var matrixRoles = map[string]bool{RoleQ: true, RoleK: true, RoleV: true, RoleO: true,
	RoleGate: true, RoleDown: true, RoleUp: true, RoleOutput: true}

// storage is how weight w of role is uploaded, given the storage dt the
// loader asks for: the weight (the embedding's replaced by its quantized
// bytes when the plan round-trips it) and the DType on the device.
func (p weightPlan) storage(w Weight, role string, dt accel.DType) (Weight, accel.DType, error) {
	float := w.Type == gguf.F32 || w.Type == gguf.F16 || w.Type == gguf.BF16
	if role == RoleEmbedding {
		if p.emb != 0 && p.emb.BlockSize() > 1 && float {
			x := make([]float32, w.Rows*w.Cols)
			for r := 0; r < w.Rows; r++ {
				n := len(w.Data) / w.Rows
				if err := decodeRow(w.Type, w.Data[r*n:(r+1)*n], x[r*w.Cols:(r+1)*w.Cols]); err != nil {
					return w, dt, fmt.Errorf("llama: %s: %w", where(w), err)
				}
			}
			b, err := quantizeMatrix(x, p.emb)
			if err != nil {
				return w, dt, err
			}
			qt, _ := p.emb.Quant()
			w.Type, w.Data = gguf.GGMLType(qt), b
		}
		return w, dt, nil
	}
	if !matrixRoles[role] {
		return w, dt, nil
	}
	if qdt, ok := accel.QuantDType(quant.Type(w.Type)); ok {
		return w, qdt, nil // used as it is
	}
	if w.Type == gguf.Q5_0 {
		// Exactly Q8_0 (see q5ToQ8).
		w.Type, w.Data = gguf.Q8_0, q5ToQ8(w.Data)
		return w, accel.Q8_0, nil
	}
	if !float {
		*p.dequantised = append(*p.dequantised, fmt.Sprintf("%s (%s)", w.Name, w.Type))
	}
	if p.mat.BlockSize() > 1 {
		if role == RoleOutput {
			return w, p.output(w.Cols), nil
		}
		return w, p.of(w.Cols), nil
	}
	return w, dt, nil
}

// quantizeMatrix encodes a row-major matrix (rows a whole number of dt's
// blocks) with ggml's reference quantizer.
func quantizeMatrix(v []float32, dt accel.DType) ([]byte, error) {
	qt, ok := dt.Quant()
	if !ok {
		return nil, fmt.Errorf("llama: %s is not a quantized type", dt)
	}
	n, err := quant.RowBytes(qt, int64(len(v)))
	if err != nil {
		return nil, fmt.Errorf("llama: quantizing to %s: %w", dt, err)
	}
	b := make([]byte, n)
	if err := quant.Quantize(qt, v, b); err != nil {
		return nil, fmt.Errorf("llama: quantizing to %s: %w", dt, err)
	}
	return b, nil
}

// q5ToQ8 re-encodes Q5_0 blocks as Q8_0 with the same values: a Q5_0
// block is an f16 scale d and 32 integers q-16 in -16..15 (x = (q-16)·d),
// a Q8_0 block the same scale and 32 int8, so each value is kept exactly.
// ggml multiplies a Q5_0 matrix by Q8_0-quantized activations as it does a
// Q8_0 one (the same integer sums, each block's scaled by d·dx), so the
// matrix runs on the Q8_0 kernels instead of being dequantised to float32
// (llama-quantize's Q4_K_M stores a row of whole 32s but not 256s, a
// 25M-parameter shape's feed-forward down projection, as Q5_0), reading
// 34 bytes per 32 weights instead of 128.
func q5ToQ8(b []byte) []byte {
	const q5, q8 = 22, 34
	out := make([]byte, len(b)/q5*q8)
	for i := 0; i < len(b)/q5; i++ {
		s, d := b[i*q5:(i+1)*q5], out[i*q8:(i+1)*q8]
		d[0], d[1] = s[0], s[1]
		qh := binary.LittleEndian.Uint32(s[2:])
		for j := 0; j < 16; j++ {
			h0 := byte(qh>>j<<4) & 0x10
			h1 := byte(qh>>(j+12)) & 0x10
			d[2+j] = byte(int8(s[6+j]&0xf|h0) - 16)
			d[2+16+j] = byte(int8(s[6+j]>>4|h1) - 16)
		}
	}
	return out
}
