package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const storiesGGUF = "../../model/gguf/testdata/stories260K.gguf"

// llama.cpp's conversion of stories260K prints the reference continuation
// (eager here; replayed in model/llama's TestGGUFStories260K);
// its file says a context of 128, so the full 256 steps need
// --max-model-len, and generate says why when it stops early.
func TestGenerateGGUF(t *testing.T) {
	want, err := os.ReadFile("../../model/stories260k/testdata/Once_upon_a_time.txt")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("REPRISE_PLAN_CACHE", "off")
	code, out, errs := runCLI(t, "generate", "--model", storiesGGUF, "--max-model-len", "512", "--prompt", "Once upon a time", "--graphs", "off", "--device-memory", "512MiB")
	if code != 0 || out != string(want) {
		t.Fatalf("exit %d (%s):\ngot  %q\nwant %q", code, errs, out, want)
	}
	if !strings.Contains(errs, "declares 128") {
		t.Errorf("no warning about raising the context: %q", errs)
	}
	// Steps past the context: generate says so and prints what fits (the
	// file's own 128 is TestMaxSeq's, model/llama).
	code, out, errs = runCLI(t, "generate", "--model", storiesGGUF, "--max-model-len", "48", "--steps", "300", "--prompt", "Once upon a time", "--graphs", "off", "--device-memory", "512MiB")
	if code != 0 || !strings.HasPrefix(string(want), strings.TrimSuffix(out, "\n")) || len(out) < 60 || len(out) >= len(want)/2 {
		t.Fatalf("exit %d (%s): 48 positions print %q", code, errs, out)
	}
	if !strings.Contains(errs, "--steps 300 is past the model's context of 48 positions") {
		t.Errorf("no warning about the cap: %q", errs)
	}
}

func TestInspect(t *testing.T) {
	code, out, errs := runCLI(t, "inspect", storiesGGUF)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"format          gguf", "context length  128", "dim 64, hidden 172, 5 layers, 8 heads, 4 kv heads, head_dim 8, vocab 512",
		"loads           yes", "tokenizer       gguf llama", "chat template   no", "48 tensors, 1171200 bytes", "blk.4.ffn_down.weight"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = runCLI(t, "inspect", "--json", storiesGGUF)
	var in struct {
		Format  string
		Config  struct{ Dim, Layers int }
		Tensors []struct{ Name, Type string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &in) != nil || in.Format != "gguf" || in.Config.Dim != 64 || len(in.Tensors) != 48 {
		t.Fatalf("json: exit %d %s %+v", code, errs, in)
	}
	if code, _, errs := runCLI(t, "inspect"); code != 2 || !strings.Contains(errs, "one model path") {
		t.Errorf("no path: %d %q", code, errs)
	}
	junk := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(junk, []byte("hello world, not a model at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI(t, "inspect", junk); code != 1 || !strings.Contains(errs, "looked for the GGUF magic") {
		t.Errorf("junk: %d %q", code, errs)
	}
	if code, _, errs := runCLI(t, "generate", "--model", junk); code != 1 || !strings.Contains(errs, "looked for the GGUF magic") {
		t.Errorf("generate junk: %d %q", code, errs)
	}
}

// serve on a GGUF file: its own name and the context served in /v1/models,
// --served-model-name over it.
func TestServeGGUF(t *testing.T) {
	t.Setenv("REPRISE_PLAN_CACHE", "off")
	for _, c := range []struct {
		args []string
		name string
		ctx  int
	}{
		{nil, "llama", 128},
		{[]string{"--served-model-name", "stories-gguf", "--max-model-len", "512"}, "stories-gguf", 512},
	} {
		url, _, stop := startServe(t, append([]string{"--model", storiesGGUF, "--graphs", "off", "--max-batch", "2", "--device-memory", "256MiB"}, c.args...)...)
		resp, err := http.Get(url + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Data []struct {
				ID          string `json:"id"`
				MaxModelLen int    `json:"max_model_len"`
			} `json:"data"`
		}
		json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if len(list.Data) != 1 || list.Data[0].ID != c.name || list.Data[0].MaxModelLen != c.ctx {
			t.Errorf("%v: /v1/models %+v, want %s with %d positions", c.args, list, c.name, c.ctx)
		}
		if code := stop(); code != 0 {
			t.Errorf("serve exited %d", code)
		}
	}
}

// serve --chat-template renders chat requests through the file's template:
// /tokenize of messages gives the tokens of the rendered text, with the
// template's BOS and no second one, and /v1/models says a template is used.
func TestServeChatTemplate(t *testing.T) {
	t.Setenv("REPRISE_PLAN_CACHE", "off")
	tmpl := filepath.Join(t.TempDir(), "chat.jinja")
	src := "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
	if err := os.WriteFile(tmpl, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	url, _, stop := startServe(t, "--model", storiesGGUF, "--graphs", "off", "--max-batch", "2", "--device-memory", "256MiB", "--chat-template", tmpl)
	tokens := func(body string) []int {
		resp, err := http.Post(url+"/tokenize", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Tokens []int }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: status %d, %v", body, resp.StatusCode, err)
		}
		return out.Tokens
	}
	got := tokens(`{"messages":[{"role":"user","content":"Once upon a time"}]}`)
	// The rendered text starts with the template's <s>; encoding it as a
	// prompt without special tokens gives the same ids (one BOS).
	want := tokens(`{"prompt":"<s>user: Once upon a time\nassistant:","add_special_tokens":false}`)
	if !slices.Equal(got, want) || len(got) == 0 || got[0] != 1 || slices.Contains(got[1:], 1) {
		t.Errorf("messages gave %v, want %v (one BOS, first)", got, want)
	}
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct {
			ChatTemplate string `json:"chat_template"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list.Data) != 1 || list.Data[0].ChatTemplate != "model" {
		t.Errorf("/v1/models says %+v, want chat_template \"model\"", list)
	}
	if code := stop(); code != 0 {
		t.Errorf("serve exited %d", code)
	}
	// A template that does not compile stops serve before it listens.
	bad := filepath.Join(t.TempDir(), "bad.jinja")
	os.WriteFile(bad, []byte("{% for %}"), 0o644)
	if code, _, errs := runCLI(t, "serve", "--model", storiesGGUF, "--graphs", "off", "--chat-template", bad); code == 0 || !strings.Contains(errs, "bad.jinja") {
		t.Errorf("a bad template: exit %d, %q", code, errs)
	}
}
