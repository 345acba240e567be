package main

import (
	"context"
	"fmt"
	"io"

	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/model/safetensors"
	"github.com/reprise-ml/reprise/tokenizer"
)

func init() {
	register(command{name: "convert", summary: "write a llama2.c checkpoint or a GGUF file (Llama architecture) as a Hugging Face directory, with its tokenizer as tokenizer.json", run: runConvert})
}

// runConvert writes a model as a Hugging Face directory (llama.WriteHF):
// safetensors in Hugging Face's layout, q and k in its rotate-half order,
// and the SentencePiece tokenizer as tokenizer.json (tokenizer.ToHF).
func runConvert(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("convert", stderr)
	var src llama.Source
	fs.StringVar(&src.Model, "model", "", "model `path` to convert: a llama2.c checkpoint (with --tokenizer) or a GGUF file (default: the embedded stories260K)")
	fs.StringVar(&src.Tokenizer, "tokenizer", "", "llama2.c tokenizer `path`: needed with a llama2.c checkpoint; replaces a GGUF file's vocabulary")
	out := fs.String("out", "", "the Hugging Face `directory` to write (made if missing; its files are replaced)")
	dtype := fs.String("dtype", "f32", "the safetensors' dtype: f32 or bf16 (quantized GGUF matrices are dequantised into it)")
	shards := fs.Int("shards", 1, "number of safetensors files (more than 1: numbered shards and model.safetensors.index.json)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("%w: convert needs --out DIR", errUsage)
	}
	dt := map[string]safetensors.DType{"f32": safetensors.F32, "bf16": safetensors.BF16}[*dtype]
	if dt == "" {
		return fmt.Errorf("%w: --dtype %q: want f32 or bf16", errUsage, *dtype)
	}
	if *shards < 1 {
		return fmt.Errorf("%w: --shards %d: want at least 1", errUsage, *shards)
	}
	l, err := llama.OpenSource(src)
	if err != nil {
		return err
	}
	defer l.Close()
	var vocab *tokenizer.Vocab
	switch {
	case l.Tokenizer != nil:
		vocab = llama.Llama2cVocab(l.Tokenizer)
	case l.Format == llama.FormatGGUF:
		f, err := gguf.Open(src.Model)
		if err != nil {
			return err
		}
		vocab, err = f.Vocab()
		f.Close()
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: %s is already a Hugging Face directory", errUsage, src.Model)
	}
	if err := llama.WriteHF(*out, l.Weights, vocab, dt, *shards); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%s, %s, %d shard(s), tokenizer.json)\n", *out, l.Name, *dtype, *shards)
	return nil
}
