package llama

import (
	"fmt"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/model/stories260k"
)

// DefaultName is the embedded default model's name.
const DefaultName = "stories260K"

// Default reads the embedded stories260K checkpoint and tokenizer.
func Default() (*llama2c.Checkpoint, *llama2c.Tokenizer, error) {
	ck, err := llama2c.ReadCheckpoint(stories260k.Checkpoint())
	if err != nil {
		return nil, nil, fmt.Errorf("embedded model: %w", err)
	}
	tok, err := llama2c.ReadTokenizer(stories260k.Tokenizer(), ck.Config.Vocab)
	if err != nil {
		return nil, nil, fmt.Errorf("embedded tokenizer: %w", err)
	}
	return ck, tok, nil
}

// Source says where a model comes from: a checkpoint and tokenizer on disk, a
// synthetic configuration, or (all empty) the embedded default.
type Source struct {
	Model     string // llama2.c checkpoint path
	Tokenizer string // llama2.c tokenizer path (needed with Model)
	Synthetic string // a SyntheticNames() entry
	Seed      uint64 // synthetic weights' seed
}

// Load reads the checkpoint (and tokenizer; nil for synthetic models) a
// Source names.
func Load(src Source) (*llama2c.Checkpoint, *llama2c.Tokenizer, string, error) {
	switch {
	case src.Synthetic != "" && src.Model != "":
		return nil, nil, "", fmt.Errorf("choose a model file or a synthetic model, not both")
	case src.Synthetic != "":
		ck, err := Synthetic(src.Synthetic, src.Seed)
		return ck, nil, "synthetic-" + src.Synthetic, err
	case src.Model != "":
		if src.Tokenizer == "" {
			return nil, nil, "", fmt.Errorf("a model file needs its tokenizer (--tokenizer)")
		}
		ck, err := llama2c.LoadCheckpoint(src.Model)
		if err != nil {
			return nil, nil, "", err
		}
		tok, err := llama2c.LoadTokenizer(src.Tokenizer, ck.Config.Vocab)
		if err != nil {
			return nil, nil, "", err
		}
		return ck, tok, src.Model, nil
	}
	ck, tok, err := Default()
	return ck, tok, DefaultName, err
}

// Open loads a Source onto dev.
func Open(dev accel.Device, src Source, opts Options) (*Model, *llama2c.Tokenizer, error) {
	ck, tok, name, err := Load(src)
	if err != nil {
		return nil, nil, err
	}
	if opts.Name == "" {
		opts.Name = name
	}
	s, err := dev.NewStream()
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	m, err := New(dev, s, ck, opts)
	return m, tok, err
}
