package accel

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Upload copies data into dst through a temporary pinned buffer and waits for
// the copy. It is for set-up (weights, tests), not for the step's hot path,
// which uses a Stager.
func Upload(s Stream, dst Buffer, data []byte) error {
	if int64(len(data)) != dst.Len() {
		return fmt.Errorf("accel: upload %d bytes into a %d-byte buffer: %w", len(data), dst.Len(), ErrInvalidArgument)
	}
	dev := s.Device()
	h, err := dev.AllocHost(int64(len(data)))
	if err != nil {
		return err
	}
	defer dev.FreeHost(h)
	copy(h.Bytes(), data)
	if err := s.CopyHtoD(dst, h); err != nil {
		return err
	}
	return s.Synchronize()
}

// Download copies src to a new host slice after the work enqueued on s so far.
func Download(s Stream, src Buffer) ([]byte, error) {
	dev := s.Device()
	h, err := dev.AllocHost(src.Len())
	if err != nil {
		return nil, err
	}
	defer dev.FreeHost(h)
	if err := s.CopyDtoH(h, src); err != nil {
		return nil, err
	}
	if err := s.Synchronize(); err != nil {
		return nil, err
	}
	return append([]byte(nil), h.Bytes()...), nil
}

// F32Bytes encodes float32s little-endian, the layout of device memory.
func F32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// I32Bytes encodes int32s little-endian.
func I32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

// BytesF32 decodes little-endian float32s.
func BytesF32(b []byte) []float32 {
	return AppendBytesF32(make([]float32, 0, len(b)/4), b)
}

// AppendBytesF32 appends the little-endian float32s of b to v (a caller
// that reads every step keeps v's storage).
func AppendBytesF32(v []float32, b []byte) []float32 {
	for i := 0; i+4 <= len(b); i += 4 {
		v = append(v, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
	}
	return v
}

// BytesI32 decodes little-endian int32s.
func BytesI32(b []byte) []int32 {
	return AppendBytesI32(make([]int32, 0, len(b)/4), b)
}

// AppendBytesI32 appends the little-endian int32s of b to v.
func AppendBytesI32(v []int32, b []byte) []int32 {
	for i := 0; i+4 <= len(b); i += 4 {
		v = append(v, int32(binary.LittleEndian.Uint32(b[i:])))
	}
	return v
}

// UploadF32 allocates a rows x cols F32 tensor from the default pool and
// fills it with v.
func UploadF32(s Stream, v []float32, rows, cols int) (Tensor, error) {
	return uploadTensor(s, F32Bytes(v), F32, rows, cols)
}

// UploadI32 allocates a rows x cols I32 tensor and fills it with v.
func UploadI32(s Stream, v []int32, rows, cols int) (Tensor, error) {
	return uploadTensor(s, I32Bytes(v), I32, rows, cols)
}

func uploadTensor(s Stream, data []byte, dt DType, rows, cols int) (Tensor, error) {
	if int64(len(data)) != int64(rows)*dt.RowBytes(cols) || rows < 0 || cols < 0 || dt.BlockSize() == 0 || cols%dt.BlockSize() != 0 {
		return Tensor{}, fmt.Errorf("accel: %d bytes for a %dx%d %s tensor: %w", len(data), rows, cols, dt, ErrInvalidArgument)
	}
	b, err := s.Device().Alloc(int64(len(data)))
	if err != nil {
		return Tensor{}, err
	}
	t := Tensor{Buf: b, DType: dt, Rows: rows, Cols: cols}
	if err := Upload(s, b, data); err != nil {
		_ = s.Device().Free(b)
		return Tensor{}, err
	}
	return t, nil
}

// DownloadF32 reads a F32 tensor after the work enqueued on s so far.
func DownloadF32(s Stream, t Tensor) ([]float32, error) {
	b, err := Download(s, t.Buf.Slice(0, t.Bytes()))
	if err != nil {
		return nil, err
	}
	return BytesF32(b), nil
}

// DownloadI32 reads an I32 tensor after the work enqueued on s so far.
func DownloadI32(s Stream, t Tensor) ([]int32, error) {
	b, err := Download(s, t.Buf.Slice(0, t.Bytes()))
	if err != nil {
		return nil, err
	}
	return BytesI32(b), nil
}
