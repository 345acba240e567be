package llama

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/quant"
)

// stageBytes is the size of each of the two pinned buffers weights pass
// through on their way to the device: host memory while loading is the
// device's copy plus these, never a second copy of the model.
const stageBytes = 8 << 20

// uploader converts weights from a file's encoding into the model's storage
// (float32, bf16, or a quantized type, kept as it is when the file's), permuting rotate-half heads into interleaved pairs, and
// stages them onto the device in bounded chunks.
type uploader struct {
	s       accel.Stream
	st      *accel.Stager
	headDim int
	out     []byte    // one chunk of converted rows
	row     []float32 // one decoded row
}

func newUploader(dev accel.Device, s accel.Stream, headDim int) (*uploader, error) {
	st, err := accel.NewStager(dev, 2, stageBytes)
	if err != nil {
		return nil, err
	}
	return &uploader{s: s, st: st, headDim: headDim}, nil
}

func (u *uploader) close() { u.st.Close() }

// alias gives the device w's own bytes to read in place, when the device
// can (accel.HostAliaser) and the source can keep them (Retainer): the
// weight then costs neither a copy nor fresh memory. ok false (and no
// error) means "upload a copy"; an error is the device's (out of memory).
func alias(dev accel.Device, ws Weights, w Weight) (b accel.Buffer, ok bool, err error) {
	a, ok1 := dev.(accel.HostAliaser)
	r, ok2 := ws.(Retainer)
	if !ok1 || !ok2 {
		return accel.Buffer{}, false, nil
	}
	release, ok := r.Retain(w)
	if !ok {
		return accel.Buffer{}, false, nil
	}
	if b, err = a.AliasHost(w.Data, release); err != nil {
		release()
		if errors.Is(err, accel.ErrUnsupported) {
			return accel.Buffer{}, false, nil
		}
		return accel.Buffer{}, false, err
	}
	return b, true, nil
}

// where names a weight in errors.
func where(w Weight) string { return fmt.Sprintf("tensor %q of %s", w.Name, w.File) }

// check validates w against the n bytes it takes as dt on the device, and
// says whether the file's bytes are already those bytes (verbatim: the same
// type, nothing to permute), which a device that reads host memory in
// place can use as they are.
func (u *uploader) check(w Weight, dt accel.DType, n int64) (verbatim bool, err error) {
	cols, rows := w.Cols, w.Rows
	if int64(rows)*dt.RowBytes(cols) != n {
		return false, fmt.Errorf("llama: %s: %d×%d does not fill %d bytes", where(w), rows, cols, n)
	}
	be, bb := w.Type.BlockSize()
	if be == 0 || cols%int(be) != 0 {
		return false, fmt.Errorf("llama: %s: ggml type %v with rows of %d", where(w), w.Type, cols)
	}
	srcRow := cols / int(be) * int(bb)
	if int64(len(w.Data)) != int64(rows)*int64(srcRow) {
		return false, fmt.Errorf("llama: %s: %d bytes, want %d for %v %d×%d", where(w), len(w.Data), int64(rows)*int64(srcRow), w.Type, rows, cols)
	}
	if w.RotateHalf && ((rows > 1 && rows%u.headDim != 0) || (rows == 1 && cols%u.headDim != 0)) {
		return false, fmt.Errorf("llama: %s: %d×%d is not whole heads of %d", where(w), rows, cols, u.headDim)
	}
	return !w.RotateHalf && sameEncoding(w.Type, dt), nil
}

// sameEncoding reports whether a file's type t stores rows exactly as dt.
func sameEncoding(t gguf.GGMLType, dt accel.DType) bool {
	qt, quantized := dt.Quant()
	return (t == gguf.F32 && dt == accel.F32) || (t == gguf.BF16 && dt == accel.BF16) || (quantized && t == gguf.GGMLType(qt))
}

// upload writes w, converted to dt, into dst (dst.Len() bytes); w has
// passed check for dt and that length.
func (u *uploader) upload(dst accel.Buffer, w Weight, dt accel.DType) error {
	cols, rows := w.Cols, w.Rows
	be, bb := w.Type.BlockSize()
	srcRow := cols / int(be) * int(bb)
	permRows := w.RotateHalf && rows > 1
	permCols := w.RotateHalf && rows == 1
	qt, quantized := dt.Quant()
	same := !permCols && sameEncoding(w.Type, dt)
	dstRow := int(dt.RowBytes(cols))
	per := max(1, stageBytes/dstRow)
	if permRows {
		// Whole heads per chunk, so a chunk's rows come from its own heads.
		per = max(1, per/u.headDim) * u.headDim
	}
	if !same && len(u.row) < cols {
		u.row = make([]float32, cols)
	}
	for r0 := 0; r0 < rows; r0 += per {
		r1 := min(rows, r0+per)
		var chunk []byte
		if same && !permRows {
			chunk = w.Data[r0*srcRow : r1*srcRow]
		} else {
			if n := (r1 - r0) * dstRow; cap(u.out) < n {
				u.out = make([]byte, n)
			}
			chunk = u.out[:(r1-r0)*dstRow]
			for r := r0; r < r1; r++ {
				sr := r
				if permRows {
					sr = interleavedFrom(r, u.headDim)
				}
				src := w.Data[sr*srcRow : (sr+1)*srcRow]
				o := chunk[(r-r0)*dstRow : (r-r0+1)*dstRow]
				if same {
					copy(o, src)
					continue
				}
				row := u.row[:cols]
				if err := decodeRow(w.Type, src, row); err != nil {
					return fmt.Errorf("llama: %s: %w", where(w), err)
				}
				if permCols {
					permuteVector(row, u.headDim)
				}
				if quantized {
					// ggml's blocks lie within rows: row by row gives the
					// whole tensor's bytes.
					if err := quant.Quantize(qt, row, o); err != nil {
						return fmt.Errorf("llama: %s: %w", where(w), err)
					}
					continue
				}
				encodeRow(o, row, dt)
			}
		}
		if err := u.st.Stage(u.s, dst.Slice(int64(r0*dstRow), int64(len(chunk))), chunk); err != nil {
			return err
		}
	}
	return u.s.Synchronize()
}

// interleavedFrom returns the rotate-half row that interleaved row r comes
// from: within a head of hd rows, interleaved rows 2j and 2j+1 are the pair
// j, which rotate-half keeps at rows j and j+hd/2. (Hugging Face's
// convert_llama_weights_to_hf.py permutes Meta's interleaved q and k into
// rotate-half; this is its inverse.)
func interleavedFrom(r, hd int) int {
	h, i := r/hd, r%hd
	return h*hd + i/2 + (i%2)*(hd/2)
}

// rotateHalfFrom is the inverse: the interleaved row that rotate-half row r
// comes from.
func rotateHalfFrom(r, hd int) int {
	h, i := r/hd, r%hd
	half := hd / 2
	if i < half {
		return h*hd + 2*i
	}
	return h*hd + 2*(i-half) + 1
}

// permuteVector reorders each head of v from rotate-half to interleaved.
func permuteVector(v []float32, hd int) {
	tmp := make([]float32, hd)
	for h := 0; h+hd <= len(v); h += hd {
		for i := range hd {
			tmp[i] = v[interleavedFrom(h+i, hd)]
		}
		copy(v[h:h+hd], tmp)
	}
}

// decodeRow decodes one row of a tensor into float32, dequantising as
// ggml defines each type (package quant).
func decodeRow(t gguf.GGMLType, src []byte, dst []float32) error {
	if t == gguf.F32 {
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
		return nil
	}
	return quant.Dequantize(quant.Type(t), src, dst)
}

// encodeRow stores a row as dt (bf16 rounded to nearest even).
func encodeRow(dst []byte, row []float32, dt accel.DType) {
	le := binary.LittleEndian
	if dt == accel.BF16 {
		for i, x := range row {
			le.PutUint16(dst[2*i:], BF16(x))
		}
		return
	}
	for i, x := range row {
		le.PutUint32(dst[4*i:], math.Float32bits(x))
	}
}
