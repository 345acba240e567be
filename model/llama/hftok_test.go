package llama

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/tokenizer"
)

// hfTokenizerOf is the tokenizer.json the project writes for a llama2.c
// tokenizer, read back by the project's own reader.
func hfTokenizerOf(t *testing.T, tok *llama2c.Tokenizer) *tokenizer.Model {
	t.Helper()
	f, err := tokenizer.ToHF(Llama2cVocab(tok), tokenizer.HFOptions{})
	must(t, err)
	m, err := tokenizer.FromFiles(f)
	must(t, err)
	return m
}

// oddStrings is a corpus of texts that stress a SentencePiece encoder:
// spaces and their runs, control characters, characters without a piece
// (byte fallback), multi-byte characters, special tokens' texts, and the
// replacement character itself.
var oddStrings = []string{
	"", " ", "  ", "   x", "x   ", "a", "Once upon a time", "The little dog", " Once upon a time",
	"Once  upon\ta\ntime\n\n", "\t", "\n", "\r\n", "\x00", "a\x00b", "\x7f\x01\x1b[0m",
	"héllo wörld", "naïve café", "日本語のテキスト", "한국어", "Ελληνικά", "emoji 🙂🙂 👩‍👩‍👧 🇫🇷",
	"e\u0301", "\u200a", "\u00a0non-breaking", "™€â", "<s>", "</s>", "<unk>", "<0x41>", "<s>Once</s>",
	"▁", "a▁b", "▁▁", " ▁ ", "Lily and Tom were best friends. They liked to play in the park.",
	"\"Hello,\" said the cat. 'Why?' 123 4567 89 0.5%", "[]{}<>|~`^", strings.Repeat("a", 300),
	strings.Repeat(" the", 50), "\xff", "\xc3", "a\xe2\x96b",
}

// TestHFTokenizerMatchesLlama2c: the tokenizer.json written for
// stories260K's llama2.c tokenizer encodes every text as llama2.c does
// (the reference prompts, a corpus of odd strings, seeded random texts
// over the vocabulary's characters and beyond) and decodes every token to
// the same bytes.
func TestHFTokenizerMatchesLlama2c(t *testing.T) {
	_, tok, err := Default()
	must(t, err)
	m := hfTokenizerOf(t, tok)
	if m.VocabSize() != tok.Vocab() {
		t.Fatalf("%d tokens, llama2.c has %d", m.VocabSize(), tok.Vocab())
	}
	texts := slices.Clone(oddStrings)
	// Random texts: pieces of the vocabulary run together (where merges
	// compete), with spaces, bytes and characters it has no piece for.
	r := rand.New(rand.NewPCG(7, 8))
	extra := []string{" ", "  ", "\n", "é", "日", "🙂", "\x00", "▁", "<s>", "ab", "aba", "ba", "\xff"}
	for range 3000 {
		var b strings.Builder
		for range 1 + r.IntN(12) {
			if r.IntN(4) == 0 {
				b.WriteString(extra[r.IntN(len(extra))])
				continue
			}
			p, _ := tok.Token(3 + 256 + r.IntN(tok.Vocab()-259))
			b.Write(p)
		}
		texts = append(texts, b.String())
	}
	for _, s := range texts {
		if strings.Contains(s, "▁") {
			checkMetaspace(t, tok, m, s)
			continue
		}
		want := tok.Encode(s, true, false)
		got := m.Encode(s, true)
		if !slices.Equal(got, want) {
			t.Errorf("%q: tokenizer.json encodes %v, llama2.c %v", s, got, want)
			continue
		}
		// Decoding after BOS, token by token.
		var a, b []byte
		for i := 1; i < len(want); i++ {
			a = append(a, tok.Piece(want[i-1], want[i])...)
			b = append(b, m.Piece(got[i-1], got[i])...)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%q: tokenizer.json decodes %q, llama2.c %q", s, b, a)
		}
	}
	// Every text token decodes alike after BOS and after another token,
	// but for the byte token of a space right after BOS: Llama 2's
	// decoder strips the text's leading space after decoding bytes (so
	// from <0x20> too), llama2.c and SentencePiece only from a piece's "▁".
	space := 3 + int(' ')
	if got := string(m.Piece(llama2c.BOS, space)); got != "" {
		t.Errorf("<0x20> after BOS decodes to %q, not Llama 2's \"\"", got)
	}
	for id := 3; id < tok.Vocab(); id++ {
		for _, prev := range []int{llama2c.BOS, 300} {
			if id == space && prev == llama2c.BOS {
				continue
			}
			if a, b := tok.Piece(prev, id), m.Piece(prev, id); !bytes.Equal(a, b) {
				t.Errorf("token %d after %d: tokenizer.json %q, llama2.c %q", id, prev, b, a)
			}
		}
	}
	if sp := m.Special(); sp.BOS != llama2c.BOS || !sp.AddBOS || sp.AddEOS || !sp.IsEOS(llama2c.EOS) || !m.IsControl(llama2c.BOS) {
		t.Errorf("special tokens %+v", sp)
	}
}

// checkMetaspace: a text holding "▁" (U+2581, SentencePiece's space)
// encodes as the text with spaces in its place, as SentencePiece reads it
// (its normalizer, like tokenizer.json's, writes every space as "▁"); only
// llama2.c, whose pieces hold spaces, encodes the character's bytes.
func checkMetaspace(t *testing.T, tok *llama2c.Tokenizer, m *tokenizer.Model, s string) {
	t.Helper()
	if got, want := m.Encode(s, true), tok.Encode(strings.ReplaceAll(s, "▁", " "), true, false); !slices.Equal(got, want) {
		t.Errorf("%q: tokenizer.json encodes %v, llama2.c with spaces for ▁ %v", s, got, want)
	}
}
