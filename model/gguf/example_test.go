package gguf_test

import (
	"fmt"

	"github.com/reprise-ml/reprise/model/gguf"
)

func ExampleOpen() {
	f, err := gguf.Open("testdata/stories260K.gguf")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	arch, _ := f.Architecture()
	ctx, _ := f.Int(arch + ".context_length")
	emb, _ := f.Tensor("token_embd.weight")
	fmt.Println(arch, ctx, emb.Type, emb.Shape, len(f.Data(emb)))
	// Output: llama 128 F32 [64 512] 131072
}
