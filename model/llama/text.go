package llama

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/tokenizer"
)

// TextTokenizer is what generate and serve need of a tokenizer: the shape
// of llama2.c's (*llama2c.Tokenizer is one), which every model's tokenizer
// is adapted to.
type TextTokenizer interface {
	// Encode returns text's token ids, with BOS first when bos (and the
	// vocabulary wants one) and EOS last when eos.
	Encode(text string, bos, eos bool) []int
	// SafePiece is the text token prints after prev: nothing for control
	// tokens and for a lone ASCII control byte.
	SafePiece(prev, token int) []byte
}

// vocabText adapts a tokenizer.Tokenizer (GGUF and Hugging Face
// vocabularies) to TextTokenizer.
type vocabText struct{ t tokenizer.Tokenizer }

func (v vocabText) Encode(text string, bos, eos bool) []int {
	ids := v.t.Encode(text, bos)
	sp := v.t.Special()
	if eos && !sp.AddEOS && len(sp.EOS) > 0 {
		ids = append(ids, sp.EOS[0])
	}
	return ids
}

func (v vocabText) SafePiece(prev, id int) []byte {
	if v.t.IsControl(id) {
		return nil
	}
	if prev >= 0 && prev == v.t.Special().BOS {
		// BOS still starts the text (SentencePiece drops the leading space
		// of the first piece after it), as Decode has it; other control
		// tokens (chat markers) do not.
		prev = -1
	}
	p := v.t.Piece(prev, id)
	if len(p) == 1 && (p[0] < 0x20 && p[0] != '\n' && p[0] != '\t' && p[0] != '\r' || p[0] == 0x7F) {
		// A lone control byte, as llama2.c's safe_printf drops it.
		return nil
	}
	return p
}

// MaxBytesPerToken bounds the text one token stands for (serve refuses a
// prompt that cannot fit before encoding it).
func (v vocabText) MaxBytesPerToken() int { return v.t.MaxBytesPerToken() }

// ggufTokenizer builds a GGUF file's own tokenizer.
func ggufTokenizer(f *gguf.File) (tokenizer.Tokenizer, error) {
	v, err := f.Vocab()
	if err != nil {
		return nil, fmt.Errorf("llama: tokenizer: %w", err)
	}
	t, err := tokenizer.FromVocab(v, f.Path)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	return t, nil
}

// hfTokenizer reads a Hugging Face directory's tokenizer.json.
func hfTokenizer(dir string) (tokenizer.Tokenizer, error) {
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		return nil, fmt.Errorf("llama: %s: no tokenizer.json (pass --tokenizer): %w", dir, err)
	}
	t, err := tokenizer.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	return t, nil
}

// Llama2cVocab is a llama2.c tokenizer as a SentencePiece vocabulary
// (tokenizer.Vocab, what a GGUF file holds): spaces back to "▁", the
// control tokens <unk> (0), <s> (BOS) and </s> (EOS) under the names
// SentencePiece gives them (llama2.c's export writes BOS and EOS as
// "\n<s>\n" and "\n</s>\n"), the <0xHH> pieces as byte tokens, the scores as
// they are. BOS is added to an encoded text, EOS is not.
func Llama2cVocab(tok *llama2c.Tokenizer) *tokenizer.Vocab {
	n := tok.Vocab()
	v := &tokenizer.Vocab{Model: "llama", Tokens: make([]string, n), Scores: make([]float32, n), Types: make([]int32, n),
		BOS: llama2c.BOS, EOS: llama2c.EOS, UNK: 0, EOT: tokenizer.NoToken, EOM: tokenizer.NoToken, PAD: tokenizer.NoToken,
		AddBOS: new(bool), AddEOS: new(bool)}
	*v.AddBOS = true
	for id := range n {
		p, score := tok.Token(id)
		piece := strings.ReplaceAll(string(p), " ", "▁")
		typ := int32(tokenizer.TypeNormal)
		switch {
		case id == 0:
			typ = tokenizer.TypeUnknown
		case id == llama2c.BOS || id == llama2c.EOS:
			typ, piece = tokenizer.TypeControl, strings.TrimSpace(string(p))
		case isBytePiece(piece):
			typ = tokenizer.TypeByte
		}
		v.Tokens[id], v.Scores[id], v.Types[id] = piece, score, typ
	}
	return v
}

// isBytePiece reports whether p is a byte token's piece, <0xHH>.
func isBytePiece(p string) bool {
	if len(p) != 6 || !strings.HasPrefix(p, "<0x") || p[5] != '>' {
		return false
	}
	_, err := strconv.ParseUint(p[3:5], 16, 8)
	return err == nil
}

var _ TextTokenizer = (*llama2c.Tokenizer)(nil)
