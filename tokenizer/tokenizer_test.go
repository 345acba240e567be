package tokenizer_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/reprise-ml/reprise/tokenizer"
)

const english = "Once upon a time, in a small village by the sea, there lived a girl named Lily. " +
	"She loved to walk along the shore every morning, collecting shells and watching the boats. " +
	"One day she found a bottle with a letter inside; it said: \"Meet me at the lighthouse at 7:30.\" " +
	"Lily wasn't sure what to do, but she'd always wanted an adventure, so she went.\n\n"

// englishText returns n bytes of English prose.
func englishText(n int) string { return strings.Repeat(english, n/len(english)+1)[:n] }

// BenchmarkQwen3Encode is the throughput figure in docs/BENCH.md: English
// text through the Qwen3 tokenizer on one core.
func BenchmarkQwen3Encode(b *testing.B) {
	tok := qwen3(b)
	for _, n := range []int{100 << 10, 1 << 20} {
		text := englishText(n)
		b.Run(fmt.Sprintf("%dKB", n>>10), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				tok.Encode(text, false)
			}
		})
	}
}

// TestSplitterMatchesRegexp checks the hand-written split matchers against
// Go's regexp running the translated pattern, on the fixture strings and on
// random text over the characters that matter.
func TestSplitterMatchesRegexp(t *testing.T) {
	alphabet := []string{"a", "Z", "é", "日", "1", "٣", " ", "  ", "\t", "\n", "\r", "'", "'s", "'LL", "!", "?", "\u00a0", "\u3000", "😀", "\xff", "_", "-"}
	rng := rand.New(rand.NewPCG(3, 4))
	var texts []string
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(24) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	texts = append(texts, english, "  leading", "trailing   ", "a\n\n\n b", "I'M sure you'LL see", "3.14159 1234567890")
	for _, pat := range tokenizer.KnownPatterns() {
		hand, re, err := tokenizer.SplitBoth(pat)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			if h, r := hand(s), re(s); !slices.Equal(h, r) {
				t.Fatalf("pattern %q on %q:\n hand-written %q\n regexp       %q", pat, s, h, r)
			}
		}
	}
}

func TestStreamDecoder(t *testing.T) {
	tok := qwen3(t)
	text := "emoji 😀🎉👍🏽 family 👨‍👩‍👧 and 日本語のテキスト, done."
	ids := tok.Encode(text, false)
	d := tokenizer.NewStreamDecoder(tok, -1, true)
	var got strings.Builder
	for _, id := range ids {
		s := d.Add(id)
		if !utf8.ValidString(s) {
			t.Fatalf("Add(%d) gave invalid UTF-8 %q", id, s)
		}
		got.WriteString(s)
	}
	got.WriteString(d.Flush())
	if got.String() != text {
		t.Errorf("streamed %q, want %q", got.String(), text)
	}
	// A control token decodes to nothing when skipped.
	im := tok.Encode("<|im_end|>", false)
	if len(im) != 1 || !tok.IsControl(im[0]) || d.Add(im[0]) != "" {
		t.Errorf("<|im_end|> = %v, control %v", im, len(im) == 1 && tok.IsControl(im[0]))
	}
	if s := tok.Special(); !s.IsEOS(im[0]) || s.BOS != -1 || s.AddBOS {
		t.Errorf("Special = %+v", s)
	}
}

func TestMaxBytesPerToken(t *testing.T) {
	tok := qwen3(t)
	k := tok.MaxBytesPerToken()
	if k <= 0 {
		t.Fatalf("MaxBytesPerToken = %d", k)
	}
	for _, s := range []string{strings.Repeat(" ", 5000), strings.Repeat("-", 3000), englishText(10000), strings.Repeat("\n", 999)} {
		if n := len(tok.Encode(s, false)); n < (len(s)+k-1)/k {
			t.Errorf("%d tokens for %d bytes, below the bound %d bytes per token", n, len(s), k)
		}
	}
}

func TestBadTokenizerFiles(t *testing.T) {
	good := `{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}}`
	if _, err := tokenizer.FromFiles(tokenizer.Files{Tokenizer: []byte(good)}); err != nil {
		t.Fatalf("good file: %v", err)
	}
	for _, tc := range []struct{ name, json, want string }{
		{"truncated", good[:40], "not valid JSON"},
		{"unknown model", strings.Replace(good, `"BPE"`, `"Unigram"`, 1), "model.type"},
		{"merge of unknown token", strings.Replace(good, `"a b"`, `"a c"`, 1), "model.merges[0]"},
		{"unknown normalizer", strings.Replace(good, `"pre_tokenizer"`, `"normalizer":{"type":"BertNormalizer"},"pre_tokenizer"`, 1), "BertNormalizer"},
		{"unknown pre-tokenizer", strings.Replace(good, `{"type":"ByteLevel"},"decoder"`, `{"type":"Whitespace"},"decoder"`, 1), "Whitespace"},
		{"unknown decoder", strings.Replace(good, `"decoder":{"type":"ByteLevel"}`, `"decoder":{"type":"WordPiece"}`, 1), "WordPiece"},
		{"look-behind", strings.Replace(good, `"pre_tokenizer":{"type":"ByteLevel"}`, `"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(?<=a)b"},"behavior":"Isolated"}`, 1), "look-around"},
	} {
		_, err := tokenizer.FromFiles(tokenizer.Files{Tokenizer: []byte(tc.json), TokenizerName: "x/tokenizer.json"})
		if !errors.Is(err, tokenizer.ErrFormat) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "x/tokenizer.json") {
			t.Errorf("%s: %v, want an ErrFormat naming x/tokenizer.json and %q", tc.name, err, tc.want)
		}
	}
	v := &tokenizer.Vocab{Model: "gpt2", Tokens: []string{"a", "b"}, Merges: []string{"a b"}, BOS: -1, EOS: -1, EOT: -1, EOM: -1, UNK: -1, PAD: -1}
	if _, err := tokenizer.FromVocab(v, "m.gguf"); !errors.Is(err, tokenizer.ErrFormat) || !strings.Contains(err.Error(), "tokenizer.ggml.merges[0]") {
		t.Errorf("merge to an unknown token: %v", err)
	}
	v.Merges, v.Model = nil, "t5"
	if _, err := tokenizer.FromVocab(v, "m.gguf"); !errors.Is(err, tokenizer.ErrFormat) || !strings.Contains(err.Error(), "tokenizer.ggml.model") {
		t.Errorf("unknown model: %v", err)
	}
	v.Model, v.EOS = "gpt2", 7
	if _, err := tokenizer.FromVocab(v, "m.gguf"); !errors.Is(err, tokenizer.ErrFormat) || !strings.Contains(err.Error(), "eos_token_id") {
		t.Errorf("EOS out of range: %v", err)
	}
	v.EOS = -1
	m, err := tokenizer.FromVocab(v, "m.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if err := tokenizer.CheckEmbedding(m, 1, "m.gguf"); !errors.Is(err, tokenizer.ErrFormat) || !strings.Contains(err.Error(), "m.gguf") {
		t.Errorf("vocabulary larger than the embedding: %v", err)
	}
	if err := tokenizer.CheckEmbedding(m, 2, "m.gguf"); err != nil {
		t.Error(err)
	}
}

func FuzzFromFiles(f *testing.F) {
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}}`), "ab ba")
	f.Add([]byte(`{"added_tokens":[{"id":3,"content":"<s>","special":true}],"normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},"model":{"type":"BPE","byte_fallback":true,"fuse_unk":true,"unk_token":"<unk>","vocab":{"<unk>":0,"▁":1,"a":2,"<0x62>":4},"merges":[]},"decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]},"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}},{"Sequence":{"id":"A"}}],"special_tokens":{"<s>":{"ids":[3]}}}}`), "a b<s>c")
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\s+(?!\\S)|\\s+"},"behavior":"Isolated"},{"type":"Digits","individual_digits":true},{"type":"Metaspace","replacement":"▁","prepend_scheme":"first"}]},"decoder":{"type":"Metaspace"}}`), "a  1a")
	f.Fuzz(func(t *testing.T, data []byte, text string) {
		m, err := tokenizer.FromFiles(tokenizer.Files{Tokenizer: data})
		ids, ok := fuzzEncode(t, m, err, text, true)
		if !ok {
			return
		}
		if k := m.MaxBytesPerToken(); k > 0 && len(m.Encode(text, false)) < (len(text)+k-1)/k {
			t.Fatalf("%d bytes in %d tokens breaks MaxBytesPerToken %d", len(text), len(ids), k)
		}
	})
}

func FuzzFromVocab(f *testing.F) {
	f.Add("llama", "default", "<unk>\x00<s>\x00</s>\x00<0x61>\x00▁\x00a\x00▁a", "", "a a <s> b")
	f.Add("gpt2", "gpt-2", "a\x00b\x00ab\x00Ġ\x00Ġa", "a b\x00Ġ a", "ab a 'll")
	f.Add("gpt2", "deepseek-llm", "a\x00b\x00ab", "a b", "ab\n12 日本")
	f.Fuzz(func(t *testing.T, model, pre, tokens, merges, text string) {
		v := &tokenizer.Vocab{Model: model, Pre: pre, Tokens: strings.Split(tokens, "\x00"), BOS: 1, EOS: 2, EOT: -1, EOM: -1, UNK: 0, PAD: -1}
		if merges != "" {
			v.Merges = strings.Split(merges, "\x00")
		}
		v.Scores = make([]float32, len(v.Tokens))
		v.Types = make([]int32, len(v.Tokens))
		for i := range v.Types {
			v.Scores[i] = float32(i % 5)
			v.Types[i] = int32(1 + i%6)
		}
		m, err := tokenizer.FromVocab(v, "fuzz.gguf")
		fuzzEncode(t, m, err, text, false)
	})
}

// fuzzEncode checks what a fuzz target built: an error must be ErrFormat;
// a model encodes text (with special tokens) into ids of its vocabulary,
// which decode (skipping control tokens if skip) without a panic. ok is
// false after an error.
func fuzzEncode(t *testing.T, m *tokenizer.Model, err error, text string, skip bool) (ids []int, ok bool) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, tokenizer.ErrFormat) {
			t.Fatalf("error not ErrFormat: %v", err)
		}
		return nil, false
	}
	ids = m.Encode(text, true)
	for _, id := range ids {
		if id < 0 || id >= m.VocabSize() {
			t.Fatalf("id %d out of the vocabulary (%d)", id, m.VocabSize())
		}
	}
	_ = tokenizer.Decode(m, ids, skip)
	return ids, true
}
