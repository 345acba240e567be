package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

func init() {
	register(command{name: "generate", summary: "continue a prompt, the way the llama2.c reference program prints it", run: runGenerate})
}

func runGenerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate", stderr)
	var df deviceFlags
	df.register(fs, false)
	prompt := fs.String("prompt", "", "the text to continue (none: the model starts a text of its own, from BOS alone)")
	steps := fs.Int("steps", 256, "positions in all, prompt included (0: the model's length)")
	temp := fs.Float64("temperature", 0, "sampling temperature; 0 is greedy")
	topP := fs.Float64("top-p", 1, "nucleus sampling: keep the smallest set of tokens whose probability reaches p (1: off)")
	topK := fs.Int("top-k", 0, "keep the k most likely tokens (0: off)")
	seed := fs.Uint64("seed", 0, "seed of the sampler's random stream")
	graphs := onOff(true)
	fs.Var(&graphs, "graphs", "capture and replay graphs: on or off (off runs every step eager)")
	if err := parse(fs, args); err != nil {
		return err
	}
	promptSet := false
	fs.Visit(func(f *flag.Flag) { promptSet = promptSet || f.Name == "prompt" })
	if !promptSet {
		// The reference program does the same, but a user who forgot the
		// flag should not have to guess why the text is about something else.
		fmt.Fprintln(stderr, "reprise generate: no --prompt: generating from an empty prompt")
	}
	if *temp < 0 || *topP <= 0 || *topP > 1 || *topK < 0 || *steps < 0 {
		return fmt.Errorf("%w: --temperature >= 0, 0 < --top-p <= 1, --top-k >= 0, --steps >= 0", errUsage)
	}
	// A prefill of one prompt: capture only what generate uses.
	s, err := df.openSession(stderr, func(mo *llama.Options) {
		mo.PrefillBatchSizes, mo.DecodeBatchSizes = []int{1}, []int{1}
	}, engine.Options{Graphs: bool(graphs), MaxBatch: 1})
	if err != nil {
		return err
	}
	defer s.Close()
	e, tok := s.eng, s.tok
	if maxSeq := s.model.Config().SeqLen; *steps == 0 || *steps > maxSeq {
		if *steps > maxSeq {
			fmt.Fprintf(stderr, "reprise generate: --steps %d is past the model's context of %d positions; printing %d (--max-model-len raises the context)\n", *steps, maxSeq, maxSeq)
		}
		*steps = maxSeq
	}
	if err := e.Start(ctx); err != nil {
		return err
	}
	ids := tok.Encode(*prompt, true, false)
	prompt32 := make([]int32, len(ids))
	for i, x := range ids {
		prompt32[i] = int32(x)
	}
	// The prompt's pieces, as the reference prints them while it feeds the
	// prompt through, up to the step limit.
	for i := 1; i < len(ids) && i <= *steps; i++ {
		stdout.Write(tok.SafePiece(ids[i-1], ids[i]))
	}
	if len(ids) > *steps {
		fmt.Fprintln(stdout)
		return nil
	}
	req := engine.Request{Prompt: prompt32, MaxTokens: *steps - len(ids) + 1,
		Sampling: engine.Sampling{Temperature: float32(*temp), TopK: *topK, TopP: float32(*topP), Seed: *seed}}
	h, err := e.Submit(ctx, req)
	if err != nil {
		return err
	}
	prev := ids[len(ids)-1]
	n := 0
	var start time.Time
	for o := range h.Outputs() {
		if o.Done {
			if o.Err != nil {
				return o.Err
			}
			break
		}
		if n == 0 {
			start = time.Now()
		}
		stdout.Write(tok.SafePiece(prev, int(o.Token)))
		prev = int(o.Token)
		n++
	}
	fmt.Fprintln(stdout)
	if n > 1 {
		fmt.Fprintf(stderr, "achieved tok/s: %.1f\n", float64(n-1)/time.Since(start).Seconds())
	}
	return nil
}
