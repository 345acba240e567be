package llama

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/model/stories260k"
	"github.com/reprise-ml/reprise/tokenizer"
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

// Source says where a model comes from: a model file or directory on disk
// (a GGUF file, a Hugging Face directory or a llama2.c checkpoint, told
// apart by their content), a synthetic configuration, or (all empty) the
// embedded default.
type Source struct {
	Model     string // path of a GGUF file, a Hugging Face directory or a llama2.c checkpoint
	Tokenizer string // llama2.c tokenizer path: needed with a llama2.c checkpoint, overrides a file's own
	Synthetic string // a SyntheticNames() entry
	Seed      uint64 // synthetic weights' seed
	// MaxSeq, when positive, is the context length to serve instead of the
	// file's (raising it above what the file declares is allowed, with a
	// warning: RoPE has no hard limit, but the model was not trained there).
	MaxSeq int
}

// Model formats, as Detect names them.
const (
	FormatGGUF        = "gguf"
	FormatHuggingFace = "huggingface"
	FormatLlama2c     = "llama2c"
	FormatEmbedded    = "embedded"
	FormatSynthetic   = "synthetic"
)

// ErrUnknownFormat is wrapped by Detect's error for a path that is no model
// it knows.
var ErrUnknownFormat = errors.New("not a model reprise can read")

// Detect tells a model path's format from its content: the GGUF magic, a
// directory holding config.json (Hugging Face), or a llama2.c checkpoint
// header whose configuration implies exactly the file's size.
func Detect(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("llama: %w", err)
	}
	if st.IsDir() {
		if _, err := os.Stat(filepath.Join(path, "config.json")); err != nil {
			return "", fmt.Errorf("llama: %s: %w: a directory without config.json (looked for a Hugging Face model directory)", path, ErrUnknownFormat)
		}
		return FormatHuggingFace, nil
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("llama: %s: %w: not a regular file (%s)", path, ErrUnknownFormat, st.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("llama: %w", err)
	}
	defer f.Close()
	var hdr [28]byte
	n, _ := io.ReadFull(f, hdr[:])
	if gguf.IsGGUF(hdr[:n]) {
		return FormatGGUF, nil
	}
	if n == len(hdr) {
		if want, ok := llama2c.HeaderFileSize(hdr[:]); ok && want == st.Size() {
			return FormatLlama2c, nil
		}
	}
	return "", fmt.Errorf("llama: %s: %w: looked for the GGUF magic %q, a llama2.c checkpoint header that implies the file's %d bytes, or a directory with config.json",
		path, ErrUnknownFormat, gguf.Magic, st.Size())
}

// Loaded is an opened model source: its weights (still on the host, mapped)
// and what serving it needs besides.
type Loaded struct {
	Format  string
	Weights Weights
	// Text is the tokenizer generate and serve use (nil for synthetic
	// models): a llama2.c tokenizer, or Vocab adapted.
	Text TextTokenizer
	// Tokenizer is the llama2.c tokenizer, for llama2.c checkpoints, the
	// embedded model and --tokenizer (nil otherwise).
	Tokenizer *llama2c.Tokenizer
	// Vocab is the model's own tokenizer (GGUF vocabulary, tokenizer.json),
	// nil for llama2.c tokenizers.
	Vocab tokenizer.Tokenizer
	// Name is the model's own name (general.name, the directory's name,
	// the file's name).
	Name       string
	StopTokens []int32
	// Warnings are what the user should be told at start-up (a context
	// raised beyond the file's, capped at a sliding window).
	Warnings []string
}

// Close releases the weights' mappings.
func (l *Loaded) Close() error {
	if l == nil || l.Weights == nil {
		return nil
	}
	return l.Weights.Close()
}

// configured overrides a source's Config.
type configured struct {
	Weights
	cfg Config
}

func (c configured) Config() Config { return c.cfg }

// Retain passes Retainer through.
func (c configured) Retain(w Weight) (func(), bool) {
	if r, ok := c.Weights.(Retainer); ok {
		return r.Retain(w)
	}
	return nil, false
}

// OpenSource opens what a Source names, without touching a device.
func OpenSource(src Source) (*Loaded, error) {
	l, err := openSource(src)
	if err != nil {
		return nil, err
	}
	cfg := l.Weights.Config()
	changed := false
	if src.MaxSeq > 0 && src.MaxSeq != cfg.SeqLen {
		if src.MaxSeq > cfg.TrainedSeqLen {
			l.Warnings = append(l.Warnings, fmt.Sprintf("serving a context of %d positions while the model declares %d: positions beyond it may degrade", src.MaxSeq, cfg.TrainedSeqLen))
		}
		cfg.SeqLen, changed = src.MaxSeq, true
	}
	if cfg.SlidingWindow > 0 && cfg.SeqLen > cfg.SlidingWindow {
		l.Warnings = append(l.Warnings, fmt.Sprintf("context capped at the sliding window of %d positions (sliding-window attention is not implemented; within the window it equals full attention)", cfg.SlidingWindow))
		cfg.SeqLen, changed = cfg.SlidingWindow, true
	}
	if changed {
		l.Weights = configured{l.Weights, cfg}
	}
	return l, nil
}

func openSource(src Source) (*Loaded, error) {
	switch {
	case src.Synthetic != "" && src.Model != "":
		return nil, fmt.Errorf("choose a model file or a synthetic model, not both")
	case src.Synthetic != "":
		ck, err := Synthetic(src.Synthetic, src.Seed)
		if err != nil {
			return nil, err
		}
		return &Loaded{Format: FormatSynthetic, Weights: CheckpointWeights(ck), Name: "synthetic-" + src.Synthetic, StopTokens: []int32{llama2c.BOS}}, nil
	case src.Model == "":
		ck, tok, err := Default()
		if err != nil {
			return nil, err
		}
		return &Loaded{Format: FormatEmbedded, Weights: CheckpointWeights(ck), Tokenizer: tok, Text: tok, Name: DefaultName, StopTokens: []int32{llama2c.BOS}}, nil
	}
	format, err := Detect(src.Model)
	if err != nil {
		return nil, err
	}
	var l *Loaded
	switch format {
	case FormatLlama2c:
		if src.Tokenizer == "" {
			return nil, fmt.Errorf("a llama2.c checkpoint needs its tokenizer (--tokenizer)")
		}
		ck, err := llama2c.LoadCheckpoint(src.Model)
		if err != nil {
			return nil, err
		}
		base := filepath.Base(src.Model)
		l = &Loaded{Weights: CheckpointWeights(ck), Name: strings.TrimSuffix(base, filepath.Ext(base)), StopTokens: []int32{llama2c.BOS}}
	case FormatGGUF:
		f, err := gguf.Open(src.Model)
		if err != nil {
			return nil, err
		}
		ws, err := GGUFWeights(f)
		if err != nil {
			f.Close()
			return nil, err
		}
		name, _ := f.String("general.name")
		if name == "" {
			name = strings.TrimSuffix(filepath.Base(src.Model), ".gguf")
		}
		l = &Loaded{Weights: ws, Name: name, StopTokens: ggufStopTokens(f)}
		if src.Tokenizer == "" {
			if l.Vocab, err = ggufTokenizer(f); err != nil {
				ws.Close()
				return nil, err
			}
		}
	case FormatHuggingFace:
		hf, err := OpenHF(src.Model)
		if err != nil {
			return nil, err
		}
		l = &Loaded{Weights: hf, Name: filepath.Base(filepath.Clean(src.Model)), StopTokens: hf.StopTokens()}
		if src.Tokenizer == "" {
			if l.Vocab, err = hfTokenizer(src.Model); err != nil {
				hf.Close()
				return nil, err
			}
		}
	}
	l.Format = format
	if src.Tokenizer != "" {
		tok, err := llama2c.LoadTokenizer(src.Tokenizer, l.Weights.Config().Vocab)
		if err != nil {
			l.Close()
			return nil, err
		}
		l.Tokenizer = tok
	}
	if l.Vocab != nil {
		if err := tokenizer.CheckEmbedding(l.Vocab, l.Weights.Config().Vocab, src.Model); err != nil {
			l.Close()
			return nil, fmt.Errorf("llama: %w", err)
		}
		l.Text = vocabText{l.Vocab}
	} else if l.Tokenizer != nil {
		l.Text = l.Tokenizer
	}
	return l, nil
}

// Load reads the llama2.c checkpoint (and tokenizer; nil for synthetic
// models) a Source names: the embedded default, a synthetic configuration
// or a llama2.c file.
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

// Open loads a Source onto dev: each tensor is uploaded once from the
// file's mapping, which is released before Open returns, but for the pages
// of tensors the device reads in place (see NewFrom), which stay mapped
// until the model is closed.
func Open(dev accel.Device, src Source, opts Options) (*Model, *llama2c.Tokenizer, error) {
	m, l, err := OpenLoaded(dev, src, opts)
	if err != nil {
		return nil, nil, err
	}
	return m, l.Tokenizer, nil
}

// OpenLoaded is Open that also returns what was opened (its weights
// already closed): the format, the name, the warnings.
func OpenLoaded(dev accel.Device, src Source, opts Options) (*Model, *Loaded, error) {
	l, err := OpenSource(src)
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	if opts.Name == "" {
		opts.Name = l.Name
	}
	if opts.StopTokens == nil {
		opts.StopTokens = l.StopTokens
	}
	s, err := dev.NewStream()
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	m, err := NewFrom(dev, s, l.Weights, opts)
	if err != nil {
		return nil, nil, err
	}
	return m, l, nil
}
