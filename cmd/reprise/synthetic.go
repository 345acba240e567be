package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/model/llama2c"
)

func init() {
	register(command{name: "synthetic", summary: "write a synthetic model's seeded random weights as a llama2.c checkpoint (for other programs, e.g. llama.cpp's converter)", run: runSynthetic})
}

// runSynthetic writes the checkpoint that --synthetic NAME --seed S runs, so
// that another program (llama.cpp's llama-convert-llama2c-to-ggml, then
// llama-quantize) can make a GGUF file of the same shape and both programs
// can be timed on that one file (scripts/vs-llamacpp.sh).
func runSynthetic(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("synthetic", stderr)
	name := fs.String("synthetic", "", "the synthetic model to write: "+strings.Join(llama.SyntheticNames(), ", "))
	seed := fs.Uint64("seed", 1, "seed of its weights (the default is bench's, so the file holds what `reprise bench --synthetic NAME` runs)")
	out := fs.String("out", "", "the llama2.c checkpoint `file` to write (replaced whole, or left as it was on an error)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *name == "" || *out == "" {
		return fmt.Errorf("%w: synthetic needs --synthetic NAME (%s) and --out FILE", errUsage, strings.Join(llama.SyntheticNames(), ", "))
	}
	ck, err := llama.Synthetic(*name, *seed)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err := writeFileAtomic(*out, func(w io.Writer) error { return llama2c.WriteCheckpoint(w, ck) }); err != nil {
		return err
	}
	c := ck.Config
	fmt.Fprintf(stdout, "%s: synthetic %s (seed %d): dim %d, hidden %d, %d layers, %d heads, %d kv heads, vocab %d, seq %d, shared classifier %v\n",
		*out, *name, *seed, c.Dim, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.Vocab, c.SeqLen, c.SharedClassifier)
	return nil
}

// writeFileAtomic writes a temporary file beside path and renames it over
// path once write and Close have succeeded, so that a failed or interrupted
// run never leaves a truncated model behind under the final name.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// CreateTemp makes the file 0600; a model file is for others to read.
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
