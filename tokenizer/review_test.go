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
