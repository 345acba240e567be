package gguf

import (
	"errors"

	"github.com/reprise-ml/reprise/tokenizer"
)

// Vocab returns the file's vocabulary (the tokenizer.ggml.* keys, with
// general.name and tokenizer.chat_template) as the plain data
// tokenizer.FromVocab builds a tokenizer from. Absent optional keys are
// left at their "absent" values; a key of the wrong type is an error.
func (f *File) Vocab() (*tokenizer.Vocab, error) {
	v := &tokenizer.Vocab{BOS: tokenizer.NoToken, EOS: tokenizer.NoToken, EOT: tokenizer.NoToken,
		EOM: tokenizer.NoToken, UNK: tokenizer.NoToken, PAD: tokenizer.NoToken}
	var err error
	if v.Model, err = f.String("tokenizer.ggml.model"); err != nil {
		return nil, err
	}
	if v.Tokens, err = f.Strings("tokenizer.ggml.tokens"); err != nil {
		return nil, err
	}
	opt := func(err error) error {
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		return err
	}
	if v.Pre, err = f.String("tokenizer.ggml.pre"); opt(err) != nil {
		return nil, err
	}
	if v.Name, err = f.String("general.name"); opt(err) != nil {
		return nil, err
	}
	if v.ChatTemplate, err = f.String("tokenizer.chat_template"); opt(err) != nil {
		return nil, err
	}
	if v.Scores, err = f.Float32s("tokenizer.ggml.scores"); opt(err) != nil {
		return nil, err
	}
	if v.Merges, err = f.Strings("tokenizer.ggml.merges"); opt(err) != nil {
		return nil, err
	}
	types, err := f.Ints("tokenizer.ggml.token_type")
	if opt(err) != nil {
		return nil, err
	}
	if types != nil {
		v.Types = make([]int32, len(types))
		for i, t := range types {
			v.Types[i] = int32(max(min(t, 1<<30), -1<<30))
		}
	}
	for _, id := range []struct {
		key string
		dst *int
	}{
		{"tokenizer.ggml.bos_token_id", &v.BOS}, {"tokenizer.ggml.eos_token_id", &v.EOS},
		{"tokenizer.ggml.eot_token_id", &v.EOT}, {"tokenizer.ggml.eom_token_id", &v.EOM},
		{"tokenizer.ggml.unknown_token_id", &v.UNK}, {"tokenizer.ggml.padding_token_id", &v.PAD},
	} {
		n, err := f.Int(id.key)
		if opt(err) != nil {
			return nil, err
		}
		if err == nil {
			*id.dst = int(max(min(n, 1<<40), -1))
			if n == 1<<32-1 {
				// llama.cpp's converters write uint32 -1 for "no such
				// token" (LLAMA_TOKEN_NULL).
				*id.dst = tokenizer.NoToken
			}
		}
	}
	for _, b := range []struct {
		key string
		dst **bool
	}{
		{"tokenizer.ggml.add_bos_token", &v.AddBOS}, {"tokenizer.ggml.add_eos_token", &v.AddEOS},
		{"tokenizer.ggml.add_space_prefix", &v.AddSpacePrefix},
	} {
		x, err := f.Bool(b.key)
		if opt(err) != nil {
			return nil, err
		}
		if err == nil {
			*b.dst = &x
		}
	}
	return v, nil
}
