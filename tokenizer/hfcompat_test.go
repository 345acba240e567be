package tokenizer_test

import (
	"errors"
	"slices"
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

// Hugging Face matches an added token with normalized: true, special or
// not, in the normalized text, against its content normalized the same way
// (added_vocabulary.rs refresh_added_tokens partitions on normalized
// alone, and normalizes the content of the normalized ones).
func TestNormalizedAddedTokens(t *testing.T) {
	file := `{"added_tokens":[` +
		`{"id":10,"content":"Day","normalized":true,"special":false},` +
		`{"id":11,"content":"[X]","normalized":true,"special":true},` +
		`{"id":12,"content":"[Y]","normalized":false,"special":true}],` +
		`"normalizer":{"type":"Lowercase"},` +
		`"model":{"type":"BPE","vocab":{"a":0,"d":1,"y":2,"[":3,"]":4,"x":5," ":6},"merges":[]},"decoder":{"type":"Fuse"}}`
	checkEncodes(t, file, []encodeCase{
		{"a DAY", []int{0, 6, 10}},     // "day" in the normalized text is "Day" normalized
		{"Day", []int{10}},             // and so is "Day"
		{"[x]a", []int{11, 0}},         // a special token with normalized: true too
		{"[X]a", []int{11, 0}},         // (its content normalized as well)
		{"[Y][y]", []int{12, 3, 2, 4}}, // normalized: false matches the raw text only
	})
}

// single_word decides on Rust's Unicode \w (added_vocabulary.rs
// ends_with_word / starts_with_word): letters, marks, decimal and letter
// numbers, connector punctuation, ZWJ/ZWNJ; not other numbers such as ².
func TestSingleWordBoundaries(t *testing.T) {
	file := `{"added_tokens":[{"id":9,"content":"<w>","single_word":true,"normalized":false,"special":false}],` +
		`"model":{"type":"BPE","vocab":{"<":0,"w":1,">":2,"²":3,"e":4,"\u0301":5,"‿":6,"Ⅳ":7},"merges":[]},"decoder":{"type":"Fuse"}}`
	checkEncodes(t, file, []encodeCase{
		{"²<w>", []int{3, 9}},                // ² is No: not a word character
		{"e\u0301<w>", []int{4, 5, 0, 1, 2}}, // a combining mark is one
		{"<w>‿", []int{0, 1, 2, 6}},          // so is connector punctuation
		{"Ⅳ<w>", []int{7, 0, 1, 2}},          // and a letter number (Alphabetic)
	})
}

// A match that single_word rejects is still consumed, as Hugging Face's
// non-overlapping Aho-Corasick scan consumes it: no shorter added token is
// sought inside it.
func TestSingleWordRejectedMatchConsumed(t *testing.T) {
	file := `{"added_tokens":[{"id":8,"content":"ab","single_word":true,"normalized":false},{"id":9,"content":"b","normalized":false}],` +
		`"model":{"type":"BPE","vocab":{"x":0,"a":1,"b":2},"merges":[]},"decoder":{"type":"Fuse"}}`
	checkEncodes(t, file, []encodeCase{
		{"xab", []int{0, 1, 2}},     // "ab" rejected (x before it), and "b" inside it not sought
		{"xabb", []int{0, 1, 2, 9}}, // the "b" after it still is
		{"ab", []int{8}},
	})
}

// A pair listed twice among tokenizer.json's merges takes its last rank:
// Hugging Face collects the merges into a map, later entries replacing
// earlier ones (llama.cpp's GGUF ranks keep the first, see FromVocab).
func TestDuplicateMergeTakesLastRank(t *testing.T) {
	file := `{"model":{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"ab":3,"bc":4},"merges":["b c","a b","b c"]},"decoder":{"type":"Fuse"}}`
	m, err := tokenizer.FromFiles(tokenizer.Files{Tokenizer: []byte(file)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Encode("abc", false), []int{3, 2}; !slices.Equal(got, want) {
		t.Errorf("Encode(abc) = %v, want %v", got, want)
	}
}

// Hugging Face's ByteLevel decoder maps a token's characters back to bytes
// only when every one of them is in the byte alphabet; otherwise the token
// is its own UTF-8 (decoders/byte_level.rs: try_fold, else t.as_bytes()).
func TestByteLevelDecoderWholeToken(t *testing.T) {
	file := `{"added_tokens":[{"id":3,"content":"é日","normalized":false,"special":false}],` +
		`"model":{"type":"BPE","vocab":{"Ã":0,"©":1,"Ġ":2},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}}`
	m, err := tokenizer.FromFiles(tokenizer.Files{Tokenizer: []byte(file)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ids  []int
		want string
	}{
		{[]int{3}, "é日"},   // 日 is no byte-level character: the token stands as written
		{[]int{0, 1}, "é"}, // Ã © are the bytes C3 A9
		{[]int{2, 3, 2}, " é日 "},
	} {
		if got := tokenizer.Decode(m, tc.ids, false); got != tc.want {
			t.Errorf("Decode(%v) = %q, want %q", tc.ids, got, tc.want)
		}
	}
}

// The Lowercase normalizer is Rust's char::to_lowercase, a full case
// mapping: İ (U+0130) becomes i followed by U+0307, where Go's simple
// mapping gives a bare i.
func TestLowercaseFullMapping(t *testing.T) {
	file := `{"normalizer":{"type":"Lowercase"},"model":{"type":"BPE","vocab":{"i":0,"\u0307":1,"s":2,"σ":3},"merges":[]},"decoder":{"type":"Fuse"}}`
	m, err := tokenizer.FromFiles(tokenizer.Files{Tokenizer: []byte(file)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Encode("İSΣ", false), []int{0, 1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("Encode(İSΣ) = %v, want %v", got, want)
	}
}

// A "llama" (SentencePiece) vocabulary without bos/eos/unknown ids gets
// llama.cpp's defaults for the model, 1, 2 and 0 (llm_vocab::impl::load),
// rather than being refused for adding a BOS it does not have.
func TestLlamaVocabDefaultIDs(t *testing.T) {
	v := &tokenizer.Vocab{Model: "llama", Tokens: []string{"<unk>", "<s>", "</s>", "▁a"}, Scores: []float32{0, 0, 0, -1},
		Types: []int32{tokenizer.TypeUnknown, tokenizer.TypeControl, tokenizer.TypeControl, tokenizer.TypeNormal},
		BOS:   tokenizer.NoToken, EOS: tokenizer.NoToken, EOT: tokenizer.NoToken, EOM: tokenizer.NoToken, UNK: tokenizer.NoToken, PAD: tokenizer.NoToken}
	m, err := tokenizer.FromVocab(v, "m.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Special(); s.BOS != 1 || !slices.Equal(s.EOS, []int{2}) || !s.AddBOS {
		t.Errorf("Special = %+v, want BOS 1 added and EOS [2]", s)
	}
	if got, want := m.Encode("a b", true), []int{1, 3, 0, 0, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("Encode(a b) = %v, want %v (each byte of ▁ and b unknown: id 0)", got, want)
	}
	// A vocabulary too small for the defaults keeps none.
	v.Tokens, v.Scores, v.Types = v.Tokens[:1], v.Scores[:1], v.Types[:1]
	f := false
	v.AddBOS = &f
	if m, err := tokenizer.FromVocab(v, "m.gguf"); err != nil || m.Special().BOS != -1 {
		t.Errorf("one-token vocabulary: %v, %+v", err, m.Special())
	}
}

type encodeCase struct {
	text string
	want []int
}

// checkEncodes builds the tokenizer of a tokenizer.json and checks what
// each text encodes to (no special tokens added).
func checkEncodes(t *testing.T, file string, cases []encodeCase) {
	t.Helper()
	m, err := tokenizer.FromFiles(tokenizer.Files{Tokenizer: []byte(file)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		if got := m.Encode(tc.text, false); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}
