package llama2c

import "github.com/reprise-ml/reprise/tokenizer"

// Text adapts t to tokenizer.Tokenizer: Encode with addSpecial prepends
// BOS, as llama2.c's generate does; pieces decode as Piece does (the space
// after BOS dropped, <0xHH> as its byte).
func (t *Tokenizer) Text() tokenizer.Tokenizer { return text{t} }

type text struct{ t *Tokenizer }

func (x text) Encode(s string, addSpecial bool) []int { return x.t.Encode(s, addSpecial, false) }

// Piece: a text's first token (prev < 0) decodes as after BOS, since Encode
// puts a dummy space before every text.
func (x text) Piece(prev, id int) []byte {
	if prev < 0 {
		prev = BOS
	}
	return x.t.Piece(prev, id)
}

func (x text) IsControl(id int) bool { return x.t.IsControl(id) }

func (x text) Special() tokenizer.Special {
	return tokenizer.Special{BOS: BOS, EOS: []int{EOS}, EOT: -1, AddBOS: true}
}

func (x text) VocabSize() int { return len(x.t.pieces) }

func (x text) MaxBytesPerToken() int { return x.t.MaxBytesPerToken() }

// IsControl reports whether id is <unk>, BOS or EOS: text for the model,
// not for a reader.
func (t *Tokenizer) IsControl(id int) bool {
	return id >= 0 && id < byteTokenBase && id < len(t.pieces)
}
