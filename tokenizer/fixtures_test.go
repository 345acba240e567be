package tokenizer_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/reprise-ml/reprise/chat"
	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/tokenizer"
)

var (
	qwenOnce sync.Once
	qwenTok  *tokenizer.Model
	qwenErr  error
)

// qwen3 loads testdata/qwen3 once (the file is 11 MB).
func qwen3(t testing.TB) *tokenizer.Model {
	t.Helper()
	qwenOnce.Do(func() { qwenTok, qwenErr = tokenizer.LoadDir(filepath.Join("testdata", "qwen3")) })
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenTok
}

func TestQwen3Fixtures(t *testing.T) {
	tok := qwen3(t)
	data, err := os.ReadFile(filepath.Join("testdata", "qwen3", "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Text string `json:"text"`
		IDs  []int  `json:"ids"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) != 30 {
		t.Fatalf("%d cases, want 30", len(cases))
	}
	for _, c := range cases {
		got := tok.Encode(c.Text, false)
		if !slices.Equal(got, c.IDs) && !(len(got) == 0 && len(c.IDs) == 0) {
			t.Errorf("Encode(%q) =\n %v, want\n %v", c.Text, got, c.IDs)
			continue
		}
		// Decoding gives the text back, as the NFC normalizer left it.
		if back := tokenizer.Decode(tok, got, false); back != norm.NFC.String(c.Text) {
			t.Errorf("Decode(Encode(%q)) = %q", c.Text, back)
		}
	}
}

// vocabCases reads llama.cpp's X.gguf.inp and X.gguf.out as its
// test-tokenizer-0 does.
func vocabCases(t *testing.T, base string) ([]string, [][]int) {
	t.Helper()
	inp, err := os.ReadFile(base + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(base + ".out")
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	raw := string(inp)
	const sep = "\n__ggml_vocab_test__\n"
	for pos := 0; pos < len(raw); {
		next := strings.Index(raw[pos:], sep)
		if next < 0 {
			texts = append(texts, raw[pos:])
			break
		}
		texts = append(texts, raw[pos:pos+next])
		pos += next + len(sep)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(texts) {
		t.Fatalf("%s: %d inputs, %d outputs", base, len(texts), len(lines))
	}
	var ids [][]int
	for _, l := range lines {
		var row []int
		for _, f := range strings.Fields(l) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			row = append(row, n)
		}
		ids = append(ids, row)
	}
	return texts, ids
}

func loadVocab(t testing.TB, path string) *tokenizer.Model {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := f.Vocab()
	if err != nil {
		t.Fatal(err)
	}
	m, err := tokenizer.FromVocab(v, path)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLlamaCppVocabFixtures(t *testing.T) {
	for _, name := range []string{"llama-spm", "phi-3", "gpt-2", "deepseek-llm"} {
		t.Run(name, func(t *testing.T) {
			base := filepath.Join("testdata", "vocab", "ggml-vocab-"+name+".gguf")
			m := loadVocab(t, base)
			texts, want := vocabCases(t, base)
			for i, text := range texts {
				got := tokenizer.EncodeLlamaCpp(m, text, false, false)
				if !slices.Equal(got, want[i]) && !(len(got) == 0 && len(want[i]) == 0) {
					t.Errorf("Encode(%q) =\n %v, want\n %v", text, got, want[i])
				}
				if back := tokenizer.Decode(m, got, false); back != text {
					t.Errorf("Decode(Encode(%q)) = %q", text, back)
				}
			}
		})
	}
}

// Qwen3's tokenizer_config.json carries its chat template; rendered, the
// prompt's chat markers encode as their control tokens.
func TestQwen3ChatTemplate(t *testing.T) {
	tok := qwen3(t)
	src := tok.ChatTemplates()["default"]
	want, err := os.ReadFile(filepath.Join("..", "chat", "testdata", "Qwen-Qwen3.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(src) != strings.TrimSpace(string(want)) {
		t.Fatalf("chat_template differs from chat/testdata/Qwen-Qwen3.jinja (%d and %d bytes)", len(src), len(want))
	}
	tmpl, err := chat.Compile(src, "tokenizer_config.json: chat_template")
	if err != nil {
		t.Fatal(err)
	}
	text, err := tmpl.Render(chat.Input{Messages: json.RawMessage(`[{"role":"user","content":"Hello!"}]`), AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(text, true)
	start, end := tok.Encode("<|im_start|>", false), tok.Encode("<|im_end|>", false)
	if len(start) != 1 || len(end) != 1 || ids[0] != start[0] || !tok.IsControl(start[0]) || !slices.Contains(ids, end[0]) {
		t.Fatalf("%q encodes to %v (im_start %v, im_end %v)", text, ids, start, end)
	}
	if back := tokenizer.Decode(tok, ids, false); back != text {
		t.Errorf("Decode = %q, want %q", back, text)
	}
}
