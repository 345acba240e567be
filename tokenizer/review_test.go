package tokenizer_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/tokenizer"
)

// An added token's id far past the vocabulary is refused: the vocabulary
// would otherwise grow to that id (16M entries from a 100-byte file).
func TestAddedTokenIDFarPastVocabulary(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{{"1", true}, {"40", true}, {"16777216", false}, {"5000000", false}} {
		file := `{"added_tokens":[{"id":` + tc.id + `,"content":"<x>","special":true}],` +
			`"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"decoder":{"type":"ByteLevel"}}`
		m, err := tokenizer.FromFiles(tokenizer.Files{Tokenizer: []byte(file), TokenizerName: "x/tokenizer.json"})
		if tc.ok {
			if err != nil {
				t.Errorf("id %s: %v", tc.id, err)
			}
			continue
		}
		if !errors.Is(err, tokenizer.ErrFormat) || !strings.Contains(err.Error(), "added_tokens[0]") || !strings.Contains(err.Error(), "x/tokenizer.json") {
			t.Errorf("id %s: %v (vocabulary %d), want an ErrFormat naming x/tokenizer.json and added_tokens[0]", tc.id, err, vocabSize(m))
		}
	}
}

func vocabSize(m *tokenizer.Model) int {
	if m == nil {
		return 0
	}
	return m.VocabSize()
}

// Hugging Face's Metaspace decoder drops every replacement character of a
// text's first token (decoders/metaspace.rs: i == 0 and a prepend scheme
// other than never), not only a leading one.
func TestMetaspaceDecoderFirstToken(t *testing.T) {
	file := `{"model":{"type":"BPE","vocab":{"▁▁":0,"▁a":1,"a▁b":2,"▁":3},"merges":[]},` +
		`"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"always"},"decoder":{"type":"Metaspace","replacement":"▁","prepend_scheme":"%s"}}`
	for _, tc := range []struct {
		scheme string
		ids    []int
		want   string
	}{
		{"always", []int{0, 1}, " a"},
		{"always", []int{2, 1}, "ab a"},
		{"first", []int{0, 0}, "  "},
		{"never", []int{0, 1}, "   a"},
		{"never", []int{2}, "a b"},
	} {
		m, err := tokenizer.FromFiles(tokenizer.Files{Tokenizer: []byte(strings.Replace(file, "%s", tc.scheme, 1))})
		if err != nil {
			t.Fatal(err)
		}
		if got := tokenizer.Decode(m, tc.ids, false); got != tc.want {
			t.Errorf("%s: Decode(%v) = %q, want %q", tc.scheme, tc.ids, got, tc.want)
		}
	}
}
