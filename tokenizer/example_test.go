package tokenizer_test

import (
	"fmt"

	"github.com/reprise-ml/reprise/tokenizer"
)

func ExampleByteToken() {
	for _, piece := range []string{"<0x0A>", "<0xe6>", "<0xG1>", "hello"} {
		b, ok := tokenizer.ByteToken([]byte(piece))
		fmt.Printf("%s: %#02x %v\n", piece, b, ok)
	}
	// Output:
	// <0x0A>: 0x0a true
	// <0xe6>: 0xe6 true
	// <0xG1>: 0x00 false
	// hello: 0x00 false
}
