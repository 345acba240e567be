package llama2c_test

import (
	"fmt"

	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/model/stories260k"
)

func ExampleTokenizer_Encode() {
	tok, err := llama2c.ReadTokenizer(stories260k.Tokenizer(), 512)
	if err != nil {
		panic(err)
	}
	ids := tok.Encode("Once upon a time 🙂", true, false)
	fmt.Println(ids)
	for i := 1; i < len(ids); i++ {
		fmt.Printf("%q ", tok.Piece(ids[i-1], ids[i]))
	}
	fmt.Println()
	// Output:
	// [1 403 407 261 378 410 243 162 156 133]
	// "Once" " upon" " a" " time" " " "\xf0" "\x9f" "\x99" "\x82"
}

func ExampleGenerate() {
	c, err := llama2c.ReadCheckpoint(stories260k.Checkpoint())
	if err != nil {
		panic(err)
	}
	tok, err := llama2c.ReadTokenizer(stories260k.Tokenizer(), c.Config.Vocab)
	if err != nil {
		panic(err)
	}
	// 31 positions: BOS, the four prompt tokens, then greedy tokens.
	fmt.Print(llama2c.Generate(c, tok, "Once upon a time", 31))
	// Output:
	// Once upon a time, there was a little girl named Lily. She loved to play outside in the park.
}
