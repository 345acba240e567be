package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
)

// WriteTensor is a tensor to write.
type WriteTensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte
}

// Write writes a safetensors file: the tensors in the order given, the
// header padded with spaces to 8 bytes as the reference writer does.
func Write(w io.Writer, tensors []WriteTensor, metadata map[string]string) error {
	hdr := map[string]any{}
	if metadata != nil {
		hdr["__metadata__"] = metadata
	}
	off := int64(0)
	for _, t := range tensors {
		n := t.DType.Size()
		for _, d := range t.Shape {
			n *= d
		}
		if n != int64(len(t.Data)) || t.DType.Size() == 0 {
			return fmt.Errorf("safetensors: tensor %q: %s %v does not match %d bytes", t.Name, t.DType, t.Shape, len(t.Data))
		}
		if _, dup := hdr[t.Name]; dup {
			return fmt.Errorf("safetensors: tensor %q twice", t.Name)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		hdr[t.Name] = entry{DType: t.DType, Shape: shape, DataOffsets: [2]int64{off, off + n}}
		off += n
	}
	// encoding/json writes map keys sorted: a deterministic header.
	js, err := json.Marshal(hdr)
	if err != nil {
		return err
	}
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(js)))
	bw.Write(n[:])
	bw.Write(js)
	for _, t := range tensors {
		if _, err := bw.Write(t.Data); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// Index is the JSON of a sharded checkpoint's index: weight_map from
// tensor name to shard file name.
func Index(weightMap map[string]string, totalSize int64) ([]byte, error) {
	// encoding/json writes a map's keys sorted.
	return json.MarshalIndent(map[string]any{
		"metadata":   map[string]any{"total_size": totalSize},
		"weight_map": weightMap,
	}, "", "  ")
}
