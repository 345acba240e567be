package engine_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/reprise-ml/reprise/accel"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// Run the embedded model with captured graphs and generate greedily.
func ExampleEngine_Generate() {
	dev, _ := accel.Open("cpu", 0, accel.Options{MemoryLimit: 512 << 20})
	defer dev.Close()
	m, tok, _ := llama.Open(dev, llama.Source{}, llama.Options{PrefillBatchSizes: []int{1}, DecodeBatchSizes: []int{1}})
	defer m.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, _ := engine.New(dev, m, engine.Options{Graphs: true, PlanCache: "off", Logger: quiet})
	defer e.Close()
	if err := e.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	prompt := tok.Encode("Once upon a time", true, false)
	ids := make([]int32, len(prompt))
	for i, t := range prompt {
		ids[i] = int32(t)
	}
	out, reason, _ := e.Generate(context.Background(), engine.Request{Prompt: ids, MaxTokens: 12})
	text := ""
	prev := prompt[len(prompt)-1]
	for _, t := range out {
		text += string(tok.SafePiece(prev, int(t)))
		prev = int(t)
	}
	fmt.Printf("%q (%s)\n", text, reason)
	// Output:
	// ", there was a little girl named Lily. She" (length)
}

// Three choices of one prompt: it is prefilled once (its tokens counted
// once), and each choice decodes on its own, as the request alone with its
// seed would.
func ExampleEngine_SubmitChoices() {
	dev, _ := accel.Open("cpu", 0, accel.Options{MemoryLimit: 512 << 20})
	defer dev.Close()
	m, tok, _ := llama.Open(dev, llama.Source{}, llama.Options{PrefillBatchSizes: []int{1}, DecodeBatchSizes: []int{1, 4}})
	defer m.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, _ := engine.New(dev, m, engine.Options{PlanCache: "off", Logger: quiet})
	defer e.Close()
	if err := e.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	var prompt []int32
	for _, t := range tok.Encode("Once upon a time", true, false) {
		prompt = append(prompt, int32(t))
	}
	req := engine.Request{Prompt: prompt, MaxTokens: 6}
	hs, err := e.SubmitChoices(context.Background(), req, []uint64{1, 2, 3})
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, h := range hs {
		n, reason := 0, ""
		for o := range h.Outputs() {
			if o.Done {
				reason = o.Reason
				continue
			}
			n++
		}
		fmt.Printf("choice %d: %d tokens (%s)\n", i, n, reason)
	}
	fmt.Println("prompt tokens prefilled:", e.Stats().PrefillTokens, "of", len(prompt))
	// Output:
	// choice 0: 6 tokens (length)
	// choice 1: 6 tokens (length)
	// choice 2: 6 tokens (length)
	// prompt tokens prefilled: 5 of 5
}
