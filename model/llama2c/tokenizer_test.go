package llama2c_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/model/stories260k"
	"github.com/reprise-ml/reprise/tokenizer"
)

// defaultTokenizer parses the embedded 512-token vocabulary.
func defaultTokenizer(t testing.TB) *llama2c.Tokenizer {
	t.Helper()
	tok, err := llama2c.ReadTokenizer(stories260k.Tokenizer(), 512)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// tokenizerFile builds tokenizer file bytes from pieces and scores.
func tokenizerFile(maxLen int32, pieces []string, scores []float32) []byte {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, uint32(maxLen))
	for i, p := range pieces {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(scores[i]))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

// syntheticVocab returns the pieces and scores of a llama2.c-style vocabulary:
// <unk>, BOS, EOS, the 256 byte tokens, then extra (all scores 0 but extra's).
func syntheticVocab(extra map[string]float32, order ...string) ([]string, []float32) {
	pieces := []string{"<unk>", "\n<s>\n", "\n</s>\n"}
	for b := range 256 {
		pieces = append(pieces, fmt.Sprintf("<0x%02X>", b))
	}
	scores := make([]float32, len(pieces))
	for _, p := range order {
		pieces = append(pieces, p)
		scores = append(scores, extra[p])
	}
	return pieces, scores
}

func TestTokenizerBasics(t *testing.T) {
	tok := defaultTokenizer(t)
	if tok.Vocab() != 512 {
		t.Errorf("Vocab = %d, want 512", tok.Vocab())
	}
	if tok.MaxTokenLength() != 7 {
		t.Errorf("MaxTokenLength = %d, want 7", tok.MaxTokenLength())
	}
	tok2, err := llama2c.LoadTokenizer(filepath.Join("..", "stories260k", "tok512.bin"), 512)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tok, tok2) {
		t.Error("LoadTokenizer and ReadTokenizer disagree")
	}
}

func TestEncode(t *testing.T) {
	tok := defaultTokenizer(t)
	// Expected ids come from llama2.c's encode (run.c) on tok512.bin.
	for _, tc := range []struct {
		text     string
		bos, eos bool
		want     []int
	}{
		{"", true, false, []int{1}},
		{"", false, false, []int{}},
		{"", false, true, []int{2}},
		{"", true, true, []int{1, 2}},
		{"Once upon a time", true, false, []int{1, 403, 407, 261, 378}},
		{"Once upon a time", false, false, []int{403, 407, 261, 378}},
		{"Once upon a time", true, true, []int{1, 403, 407, 261, 378, 2}},
		{"The little dog", true, false, []int{1, 291, 376, 400, 428}},
		{"Lily", true, false, []int{1, 317}},
		// "é" is in the vocabulary (485); "ü" (C3 BC) and "🙂" (F0 9F 99 82)
		// are not and fall back to byte tokens, id = byte + 3.
		{"é", true, false, []int{1, 410, 485}},
		{"ü", true, false, []int{1, 410, 0xC3 + 3, 0xBC + 3}},
		{"🙂", true, false, []int{1, 410, 0xF0 + 3, 0x9F + 3, 0x99 + 3, 0x82 + 3}},
		{"café 🙂!", true, false, []int{1, 280, 412, 431, 485, 410, 243, 162, 156, 133, 443}},
		// Tab and newline are not in the vocabulary either.
		{"a\tb\n", true, false, []int{1, 261, '\t' + 3, 430, '\n' + 3}},
		// NUL is an ordinary byte here (C would stop at it).
		{"a\x00", false, false, []int{261, 3}},
	} {
		got := tok.Encode(tc.text, tc.bos, tc.eos)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Encode(%q, %v, %v) = %v, want %v", tc.text, tc.bos, tc.eos, got, tc.want)
		}
	}
}

func TestEncodeMergeRules(t *testing.T) {
	for _, tc := range []struct {
		name   string
		extra  map[string]float32
		order  []string
		text   string
		want   []string
		vocabN int // 0: all pieces
	}{
		{
			name:  "tie goes to the leftmost pair",
			extra: map[string]float32{" ": 0, "a": 0, "b": 0, "ab": 1, "ba": 1},
			order: []string{" ", "a", "b", "ab", "ba"},
			text:  "aba",
			want:  []string{" ", "ab", "a"},
		},
		{
			name:  "highest score wins",
			extra: map[string]float32{" ": 0, "a": 0, "b": 0, "ab": 1, "ba": 2},
			order: []string{" ", "a", "b", "ab", "ba"},
			text:  "aba",
			want:  []string{" ", "a", "ba"},
		},
		{
			name:  "merges repeat until none applies",
			extra: map[string]float32{" ": 0, "a": 0, "b": 0, "ab": 1, "abab": 0.5, " abab": 0.2},
			order: []string{" ", "a", "b", "ab", "abab", " abab"},
			text:  "abab",
			want:  []string{" abab"},
		},
		{
			name:  "scores at or below -1e10 never merge",
			extra: map[string]float32{" ": 0, "a": 0, "b": 0, "ab": -1e10},
			order: []string{" ", "a", "b", "ab"},
			text:  "ab",
			want:  []string{" ", "a", "b"},
		},
		{
			name:  "no space token: the dummy prefix falls back to its byte",
			extra: map[string]float32{"a": 0},
			order: []string{"a"},
			text:  "a",
			want:  []string{"<0x20>", "a"},
		},
		{
			name:  "duplicate strings resolve to the lowest id",
			extra: map[string]float32{" ": 0, "a": 0},
			order: []string{" ", "a", "a"},
			text:  "aa",
			want:  []string{" ", "a", "a"},
		},
		{
			name:  "multi-byte characters are looked up whole",
			extra: map[string]float32{" ": 0, "é": 0, " é": 1},
			order: []string{" ", "é", " é"},
			text:  "éé",
			want:  []string{" é", "é"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pieces, scores := syntheticVocab(tc.extra, tc.order...)
			tok, err := llama2c.ReadTokenizer(tokenizerFile(16, pieces, scores), len(pieces))
			if err != nil {
				t.Fatal(err)
			}
			ids := tok.Encode(tc.text, false, false)
			var got []string
			for _, id := range ids {
				got = append(got, pieces[id])
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Encode(%q) = %q (ids %v), want %q", tc.text, got, ids, tc.want)
			}
			if tc.name == "duplicate strings resolve to the lowest id" && ids[1] != 260 {
				t.Errorf("duplicate resolved to id %d, want 260", ids[1])
			}
		})
	}
}

func TestEncodeLongPromptIsFast(t *testing.T) {
	tok := defaultTokenizer(t)
	text := strings.Repeat("Once upon a time, Lily saw a big dog 🙂 and said “hello”. ", 80) // ~4800 bytes
	start := time.Now()
	ids := tok.Encode(text, false, false)
	if d := time.Since(start); d > time.Second {
		t.Errorf("encoding %d bytes took %v", len(text), d)
	}
	if got := decode(tok, ids); got != " "+text {
		t.Errorf("round trip failed")
	}
}

// decode concatenates Piece(prev, id) over ids (prev of the first is -1).
func decode(tok *llama2c.Tokenizer, ids []int) string {
	var b []byte
	prev := -1
	for _, id := range ids {
		b = append(b, tok.Piece(prev, id)...)
		prev = id
	}
	return string(b)
}

func TestPiece(t *testing.T) {
	tok := defaultTokenizer(t)
	for _, tc := range []struct {
		prev, token int
		want        []byte
	}{
		{llama2c.BOS, 403, []byte("Once")}, // " Once" after BOS loses its space
		{403, 407, []byte(" upon")},        // not after BOS: keeps it
		{0, 403, []byte(" Once")},
		{llama2c.BOS, 410, []byte{}}, // " " after BOS is empty
		{llama2c.BOS, 412, []byte("a")},
		{5, 3 + 'A', []byte("A")},   // <0x41>
		{5, 3 + '\n', []byte("\n")}, // <0x0A>
		{5, 3, []byte{0}},           // <0x00>
		{llama2c.BOS, 3 + 0xFF, []byte{0xFF}},
		{5, 0, []byte("<unk>")},
		{5, llama2c.BOS, []byte("\n<s>\n")},
		{5, llama2c.EOS, []byte("\n</s>\n")},
		{5, 504, []byte("<")},
		{5, 485, []byte("é")},
		{5, -1, nil},
		{5, 512, nil},
	} {
		got := tok.Piece(tc.prev, tc.token)
		if !bytes.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("Piece(%d, %d) = %q (nil %v), want %q", tc.prev, tc.token, got, got == nil, tc.want)
		}
	}
	// The result is the caller's to modify.
	p := tok.Piece(0, 403)
	p[1] = 'X'
	if got := tok.Piece(0, 403); string(got) != " Once" {
		t.Errorf("modifying a piece changed the vocabulary: %q", got)
	}
}

func TestPieceByteForms(t *testing.T) {
	pieces, scores := syntheticVocab(map[string]float32{}, "<0xab>", "<0x4G>", "<0x41", " <0x41>", "<0x041>")
	tok, err := llama2c.ReadTokenizer(tokenizerFile(16, pieces, scores), len(pieces))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		prev, token int
		want        string
	}{
		{0, 259, "\xab"},        // lower-case hex digits are accepted
		{0, 260, "<0x4G>"},      // not hex
		{0, 261, "<0x41"},       // no closing bracket
		{0, 262, " <0x41>"},     // not exactly the form
		{llama2c.BOS, 262, "A"}, // ... until BOS strips the space
		{0, 263, "<0x041>"},     // three digits
	} {
		if got := tok.Piece(tc.prev, tc.token); string(got) != tc.want {
			t.Errorf("Piece(%d, %q) = %q, want %q", tc.prev, pieces[tc.token], got, tc.want)
		}
	}
}

func TestSafePiece(t *testing.T) {
	tok := defaultTokenizer(t)
	for _, tc := range []struct {
		prev, token int
		want        []byte
	}{
		{5, 3 + 'A', []byte("A")},
		{5, 3 + ' ', []byte(" ")},
		{5, 3 + '\n', []byte("\n")},
		{5, 3 + '\t', []byte("\t")},
		{5, 3 + '\r', []byte("\r")},
		{5, 3 + '\v', []byte("\v")},
		{5, 3 + '~', []byte("~")},
		{5, 3 + 0x00, nil}, // NUL
		{5, 3 + 0x07, nil}, // BEL
		{5, 3 + 0x1B, nil}, // ESC
		{5, 3 + 0x7F, nil}, // DEL
		{5, 3 + 0xC3, nil}, // a lone UTF-8 lead byte
		{5, 3 + 0xFF, nil},
		{llama2c.BOS, 410, nil}, // empty after the BOS space strip
		{5, 410, []byte(" ")},
		{llama2c.BOS, 403, []byte("Once")},
		{5, 485, []byte("é")}, // two bytes: printed whatever they are
		{5, 412, []byte("a")},
		{5, 512, nil},
	} {
		got := tok.SafePiece(tc.prev, tc.token)
		if !bytes.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("SafePiece(%d, %d) = %q, want %q", tc.prev, tc.token, got, tc.want)
		}
	}
	// printf("%s") stops at a NUL inside a piece.
	pieces, scores := syntheticVocab(map[string]float32{}, "ab\x00cd", "\x00x")
	syn, err := llama2c.ReadTokenizer(tokenizerFile(16, pieces, scores), len(pieces))
	if err != nil {
		t.Fatal(err)
	}
	if got := syn.SafePiece(0, 259); string(got) != "ab" {
		t.Errorf("SafePiece of %q = %q, want \"ab\"", pieces[259], got)
	}
	if got := syn.SafePiece(0, 260); got != nil {
		t.Errorf("SafePiece of %q = %q, want nil", pieces[260], got)
	}
}

func TestReadTokenizerMalformed(t *testing.T) {
	good := stories260k.Tokenizer()
	pieces, scores := syntheticVocab(map[string]float32{"abc": -1}, "abc")
	small := tokenizerFile(8, pieces, scores) // 260 tokens
	mod := func(b []byte, off int, v int32) []byte {
		b = bytes.Clone(b)
		binary.LittleEndian.PutUint32(b[off:], uint32(v))
		return b
	}
	// Offset of token 259's length field: header + 259 byte-ish tokens.
	lenOff := 4
	for _, p := range pieces[:259] {
		lenOff += 8 + len(p)
	}
	lenOff += 4
	for _, tc := range []struct {
		name  string
		data  []byte
		vocab int
		msg   string
	}{
		{"empty", nil, 512, "header needs 4 bytes, have 0"},
		{"short header", good[:3], 512, "header needs 4 bytes, have 3"},
		{"negative max_token_length", mod(good, 0, -1), 512, "negative max_token_length -1"},
		{"vocab too large for the data", good, 100000, "100000 tokens need at least"},
		{"one token too many", good, 513, "token 512 of 513 needs a score and a length"},
		{"one token too few", good, 511, "trailing bytes after 511 tokens"},
		{"truncated in a score", good[:len(good)-9], 512, "token 511 of 512 needs a score and a length, have 2 bytes"},
		{"truncated in the bytes", good[:len(good)-1], 512, "token 511 of 512 needs"},
		{"trailing byte", append(bytes.Clone(good), 0), 512, "1 trailing bytes"},
		{"negative length", mod(small, lenOff, -2), 260, "token 259 (byte " + fmt.Sprint(lenOff) + "): negative length -2"},
		{"length above max", mod(small, 0, 2), 260, "token 0 (byte 8): length 5 exceeds max_token_length 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := llama2c.ReadTokenizer(tc.data, tc.vocab)
			if tok != nil || !errors.Is(err, llama2c.ErrMalformed) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, want ErrMalformed mentioning %q", err, tc.msg)
			}
		})
	}
	if _, err := llama2c.ReadTokenizer(small, 260); err != nil {
		t.Errorf("synthetic tokenizer rejected: %v", err)
	}
	if _, err := llama2c.ReadTokenizer(good, 2); err == nil || errors.Is(err, llama2c.ErrMalformed) {
		t.Errorf("vocab 2: err = %v, want a non-format error", err)
	}
	if _, err := llama2c.LoadTokenizer(filepath.Join(t.TempDir(), "none.bin"), 512); err == nil {
		t.Error("LoadTokenizer of a missing file succeeded")
	}
}

func FuzzReadTokenizer(f *testing.F) {
	f.Add(stories260k.Tokenizer()[:200], 20)
	f.Add([]byte{7, 0, 0, 0}, 3)
	f.Fuzz(func(t *testing.T, data []byte, vocab int) {
		tok, err := llama2c.ReadTokenizer(data, vocab)
		if err == nil {
			tok.Encode(string(data), true, true)
		}
	})
}

// FuzzEncode checks that Encode never panics, that every id is in range,
// and that decoding with Piece gives back the text behind the dummy prefix
// space (and the text itself after BOS, which strips that space).
func FuzzEncode(f *testing.F) {
	for _, s := range []string{
		"", " ", "Once upon a time", "The little dog", "é", "🙂", "日本語", "a\x00b",
		"\xff\xfe", "\xc3", "\x80\x80\x80\x80\x80", "<0x41>", "<unk>", "\n<s>\n", "  \t\n",
		"Lily's mom said, “Don't worry.”", strings.Repeat("ab ", 50),
	} {
		f.Add(s)
	}
	tok := defaultTokenizer(f)
	f.Fuzz(func(t *testing.T, text string) {
		ids := tok.Encode(text, false, false)
		for _, id := range ids {
			if id < 0 || id >= tok.Vocab() {
				t.Fatalf("Encode(%q) produced id %d", text, id)
			}
		}
		if !utf8.ValidString(text) {
			return
		}
		want := ""
		if text != "" {
			want = " " + text
		}
		if got := decode(tok, ids); got != want {
			t.Fatalf("decode(Encode(%q)) = %q, want %q (ids %v)", text, got, want, ids)
		}
		withBOS := tok.Encode(text, true, true)
		if withBOS[0] != llama2c.BOS || withBOS[len(withBOS)-1] != llama2c.EOS {
			t.Fatalf("Encode(%q, true, true) = %v: missing BOS or EOS", text, withBOS)
		}
		var b []byte
		for i := 1; i < len(withBOS)-1; i++ {
			b = append(b, tok.Piece(withBOS[i-1], withBOS[i])...)
		}
		if string(b) != text {
			t.Fatalf("decode after BOS = %q, want %q", b, text)
		}
	})
}

// TestMergeMatchesRescan checks the heap merge against the C code's
// algorithm (rescan every pair, merge the best, repeat) on random
// vocabularies and texts, ties of equal scores included.
func TestMergeMatchesRescan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "c", " "}
	for trial := range 200 {
		extra := map[string]float32{}
		order := append([]string(nil), alphabet...)
		for _, a := range alphabet {
			extra[a] = 0
		}
		for range 30 {
			var p string
			for range 2 + rng.IntN(4) {
				p += alphabet[rng.IntN(len(alphabet))]
			}
			if _, ok := extra[p]; !ok {
				extra[p] = float32(rng.IntN(5)) // few distinct scores: many ties
				order = append(order, p)
			}
		}
		pieces, scores := syntheticVocab(extra, order...)
		tok, err := llama2c.ReadTokenizer(tokenizerFile(16, pieces, scores), len(pieces))
		if err != nil {
			t.Fatal(err)
		}
		var text string
		for range rng.IntN(40) {
			text += alphabet[rng.IntN(len(alphabet))]
		}
		ids := tok.Encode(text, false, false)
		var got []string
		for _, id := range ids {
			got = append(got, pieces[id])
		}
		if want := rescanMerge(text, extra); !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: Encode(%q) = %q, want %q", trial, text, got, want)
		}
	}
}

// rescanMerge is llama2.c's merge loop over strings (every character of
// text is in vocab; " " is prefixed).
func rescanMerge(text string, vocab map[string]float32) []string {
	if text == "" {
		return nil
	}
	toks := []string{" "}
	for _, r := range text {
		toks = append(toks, string(r))
	}
	for {
		best, bestScore := -1, float32(-1e10)
		for i := 0; i+1 < len(toks); i++ {
			if s, ok := vocab[toks[i]+toks[i+1]]; ok && s > bestScore {
				best, bestScore = i, s
			}
		}
		if best < 0 {
			return toks
		}
		toks[best] += toks[best+1]
		toks = append(toks[:best+1], toks[best+2:]...)
	}
}

// BenchmarkEncodeLong encodes 100 KB and 1 MB of story text: the time per
// byte stays flat (the merge is O(n log n), issue 15 item A).
func BenchmarkEncodeLong(b *testing.B) {
	tok := defaultTokenizer(b)
	for _, n := range []int{100 << 10, 1 << 20} {
		text := strings.Repeat("Once upon a time, Lily saw a big dog and said hello. ", n/52+1)[:n]
		b.Run(fmt.Sprintf("%dKB", n>>10), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				tok.Encode(text, true, false)
			}
		})
	}
}

func TestTextAdapter(t *testing.T) {
	tok := defaultTokenizer(t)
	var x tokenizer.Tokenizer = tok.Text()
	text := "Once upon a time, Lily saw a dog."
	ids := x.Encode(text, true)
	if want := tok.Encode(text, true, false); !reflect.DeepEqual(ids, want) {
		t.Fatalf("Encode = %v, want %v", ids, want)
	}
	if got := tokenizer.Decode(x, ids, true); got != text {
		t.Errorf("Decode = %q, want %q", got, text)
	}
	if s := x.Special(); s.BOS != llama2c.BOS || !s.IsEOS(llama2c.EOS) || x.VocabSize() != 512 {
		t.Errorf("Special = %+v, VocabSize = %d", s, x.VocabSize())
	}
	if n := len(ids); n < (len(text)+x.MaxBytesPerToken()-1)/x.MaxBytesPerToken() {
		t.Errorf("%d tokens for %d bytes breaks MaxBytesPerToken %d", n, len(text), x.MaxBytesPerToken())
	}
}
