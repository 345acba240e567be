package quant_test

import (
	"fmt"

	"github.com/reprise-ml/reprise/quant"
)

func ExampleDequantize() {
	// One Q8_0 block: an f16 scale (0x3800 = 0.5) and 32 int8 quants.
	block := make([]byte, quant.Q8_0.BlockBytes())
	block[0], block[1] = 0x00, 0x38
	block[2], block[3], block[4] = 2, 0xff, 127 // 2, -1, 127
	x := make([]float32, quant.Q8_0.BlockSize())
	if err := quant.Dequantize(quant.Q8_0, block, x); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(x[:4])
	n, _ := quant.RowBytes(quant.Q4_K, 4096)
	fmt.Println(n)
	// Output:
	// [1 -0.5 63.5 0]
	// 2304
}
