package serve

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/chat"
	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/tokenizer"
)

// bosTok is a llama2c tokenizer that records whether Encode added BOS.
type bosTok struct {
	*llama2c.Tokenizer
	bos []bool
}

func (b *bosTok) Encode(text string, bos, eos bool) []int {
	b.bos = append(b.bos, bos)
	return b.Tokenizer.Encode(text, bos, eos)
}

func templateServer(t *testing.T, src string, tok Tokenizer) *Server {
	t.Helper()
	cs := closedServer(t)
	var ct *ChatTemplate
	if src != "" {
		tmpl, err := chat.Compile(src, "test template")
		if err != nil {
			t.Fatal(err)
		}
		ct = &ChatTemplate{Template: tmpl, BOS: "<s>", EOS: "</s>"}
	}
	srv, err := New(cs.eng, cs.info, tok, Options{Logger: quietLogger(), Chat: ct})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func post(srv *Server, path string, body any) *httptest.ResponseRecorder {
	b, _ := json.Marshal(body)
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(b))))
	return w
}

// Gemma 2's template refuses a system message: the client gets a 400 with
// the template's text, before anything reaches the engine.
func TestChatTemplateRaiseIs400(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "chat", "testdata", "google-gemma-2-2b-it.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	_, tok, _ := llama.Default()
	srv := templateServer(t, string(src), tok)
	w := post(srv, pathChat, map[string]any{"messages": []map[string]string{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}}})
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "System role not supported") {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
}

// A template that writes BOS itself gets no second one from the encoder;
// one that does not gets the tokenizer's.
func TestChatTemplateNoDoubleBOS(t *testing.T) {
	_, tok, _ := llama.Default()
	msgs := []map[string]string{{"role": "user", "content": "Once upon a time"}}
	for _, tc := range []struct {
		src  string
		bos  bool
		text string
	}{
		{"{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}", false, "<s>[user] Once upon a time"},
		{"{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}{% if add_generation_prompt %}>{% endif %}", true, "[user] Once upon a time>"},
	} {
		bt := &bosTok{Tokenizer: tok}
		srv := templateServer(t, tc.src, bt)
		w := post(srv, pathTokenize, map[string]any{"messages": msgs})
		var got struct {
			Tokens      []int `json:"tokens"`
			Count       int   `json:"count"`
			MaxModelLen int   `json:"max_model_len"`
		}
		if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &got) != nil {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if len(bt.bos) != 1 || bt.bos[0] != tc.bos {
			t.Errorf("template %q: Encode's bos = %v, want %v", tc.src, bt.bos, tc.bos)
		}
		if want := tok.Encode(tc.text, tc.bos, false); !slices.Equal(got.Tokens, want) || got.Count != len(want) || got.MaxModelLen != srv.info.MaxSeq {
			t.Errorf("template %q: %+v, want tokens %v", tc.src, got, want)
		}
	}
}

func TestTokenizeDetokenize(t *testing.T) {
	_, tok, _ := llama.Default()
	srv := templateServer(t, "", tok)
	text := "Once upon a time, Lily saw a dog 🙂."
	w := post(srv, pathTokenize, map[string]any{"prompt": text})
	var got struct {
		Tokens []int `json:"tokens"`
		Count  int   `json:"count"`
	}
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &got) != nil {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if want := tok.Encode(text, true, false); !slices.Equal(got.Tokens, want) || got.Count != len(want) {
		t.Fatalf("tokens %v, want %v", got.Tokens, want)
	}
	w = post(srv, pathDetokenize, map[string]any{"tokens": got.Tokens})
	var back struct {
		Prompt string `json:"prompt"`
	}
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &back) != nil || back.Prompt != text {
		t.Fatalf("detokenize: status %d, %q, want %q", w.Code, back.Prompt, text)
	}
	// Without a template, messages are joined (and /v1/models says so).
	w = post(srv, pathTokenize, map[string]any{"messages": []map[string]string{{"role": "user", "content": "a"}, {"role": "user", "content": "b"}}})
	if json.Unmarshal(w.Body.Bytes(), &got) != nil || !slices.Equal(got.Tokens, tok.Encode("a\nb", true, false)) {
		t.Errorf("messages without a template: %s", w.Body)
	}
	if m := srv.model(); !strings.HasPrefix(m.ChatTemplate, "none") {
		t.Errorf("/v1/models chat_template = %q", m.ChatTemplate)
	}
	for _, bad := range []any{map[string]any{"tokens": []int{-1}}, map[string]any{"tokens": []int{1 << 20}}, map[string]any{}, []int{1}} {
		if w := post(srv, pathDetokenize, bad); w.Code != http.StatusBadRequest {
			t.Errorf("detokenize %v: status %d", bad, w.Code)
		}
	}
	for _, bad := range []any{map[string]any{}, map[string]any{"prompt": 1}, map[string]any{"prompt": "a", "messages": []any{}}} {
		if w := post(srv, pathTokenize, bad); w.Code != http.StatusBadRequest {
			t.Errorf("tokenize %v: status %d", bad, w.Code)
		}
	}
}

// A token that ends inside a UTF-8 sequence is held until the sequence is
// complete: nothing invalid is released.
func TestStopperHoldsIncompleteUTF8(t *testing.T) {
	for _, stops := range [][]string{nil, {"zz"}} {
		s := newStopper(stops)
		var out strings.Builder
		for _, piece := range [][]byte{[]byte("a"), {0xF0}, {0x9F, 0x99}, {0x82}, []byte("b")} {
			text, _ := s.add(piece)
			if !utf8Valid(text) {
				t.Fatalf("stops %v: released invalid %q", stops, text)
			}
			out.WriteString(text)
		}
		out.WriteString(s.flush())
		if out.String() != "a🙂b" {
			t.Errorf("stops %v: %q", stops, out.String())
		}
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\x00") == s }

func TestFromTokenizer(t *testing.T) {
	m, err := tokenizer.FromFiles(tokenizer.Files{Tokenizer: []byte(`{
		"added_tokens":[{"id":3,"content":"<s>","special":true},{"id":4,"content":"</s>","special":true}],
		"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},
		"pre_tokenizer":{"type":"ByteLevel","use_regex":false},"decoder":{"type":"ByteLevel"},
		"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}},{"Sequence":{"id":"A"}}],"special_tokens":{"<s>":{"ids":[3]}}}}`),
		Config: []byte(`{"bos_token":"<s>","eos_token":"</s>"}`)})
	if err != nil {
		t.Fatal(err)
	}
	tok := FromTokenizer(m)
	if got := tok.Encode("abab", true, false); !slices.Equal(got, []int{3, 2, 2}) {
		t.Errorf("Encode with BOS = %v", got)
	}
	if got := tok.Encode("ab</s>", false, false); !slices.Equal(got, []int{2, 4}) {
		t.Errorf("Encode = %v", got)
	}
	if p := tok.SafePiece(2, 4); p != nil {
		t.Errorf("SafePiece of a control token = %q", p)
	}
	if p := tok.SafePiece(3, 2); string(p) != "ab" {
		t.Errorf("SafePiece = %q", p)
	}
}
