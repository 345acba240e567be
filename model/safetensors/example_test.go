package safetensors_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/reprise-ml/reprise/model/safetensors"
)

// Write a directory's model.safetensors and read its tensors back by name.
func ExampleOpenDir() {
	dir, err := os.MkdirTemp("", "safetensors-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	var b bytes.Buffer
	err = safetensors.Write(&b, []safetensors.WriteTensor{
		{Name: "embed", DType: safetensors.F32, Shape: []int64{2, 3}, Data: make([]byte, 24)},
		{Name: "norm", DType: safetensors.BF16, Shape: []int64{3}, Data: make([]byte, 6)},
	}, map[string]string{"format": "pt"})
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, safetensors.SingleName), b.Bytes(), 0o644)
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := safetensors.OpenDir(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	for _, name := range m.Names() {
		t, f, _ := m.Tensor(name)
		fmt.Println(name, t.DType, t.Shape, t.Elements(), len(f.Data(t)))
	}
	// Output:
	// embed F32 [2 3] 6 24
	// norm BF16 [3] 3 6
}
