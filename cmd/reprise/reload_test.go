package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/model/stories260k"
	"github.com/reprise-ml/reprise/serve"
)

// reloadFiles writes stories260K's tokenizer, a copy of its checkpoint with
// the embedding scaled (same shapes) and one with a layer fewer.
func reloadFiles(t *testing.T) (tok, orig, scaled, fewer string) {
	t.Helper()
	dir := t.TempDir()
	tok = filepath.Join(dir, "tok512.bin")
	if err := os.WriteFile(tok, stories260k.Tokenizer(), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name string, edit func(c *llama2c.Checkpoint)) string {
		ck, err := llama2c.ReadCheckpoint(stories260k.Checkpoint())
		if err != nil {
			t.Fatal(err)
		}
		edit(ck)
		var b bytes.Buffer
		if err := llama2c.WriteCheckpoint(&b, ck); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	orig = write("orig.bin", func(*llama2c.Checkpoint) {})
	scaled = write("scaled.bin", func(c *llama2c.Checkpoint) {
		for i := range c.TokenEmbedding {
			c.TokenEmbedding[i] *= 1.25
		}
	})
	fewer = write("fewer.bin", func(c *llama2c.Checkpoint) {
		c.Config.Layers--
		c.Layers = c.Layers[:c.Config.Layers]
	})
	return tok, orig, scaled, fewer
}

// sessionServer serves src as `reprise serve --enable-reload` does.
func sessionServer(t *testing.T, src llama.Source, reload bool) *httptest.Server {
	t.Helper()
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	opts := llama.Options{DecodeBatchSizes: []int{1, 2}, PrefillLengths: []int{16, 32}, PrefillBatchSizes: []int{1}}
	s := &session{dev: dev, src: src, opts: opts}
	l := &llama.Loaded{}
	if s.model, l, err = llama.OpenLoaded(dev, src, opts); err != nil {
		t.Fatal(err)
	}
	if s.eng, err = engine.New(dev, s.model, engine.Options{Graphs: true, PlanCache: "off"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	so := serve.Options{APIKey: "k"}
	if reload {
		so.Reload = s.reload
	}
	srv, err := serve.New(s.eng, s.model.Info(), l.Text, so)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		cancel()
		s.Close()
	})
	return ts
}

func post(t *testing.T, url, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func completion(t *testing.T, ts *httptest.Server) string {
	t.Helper()
	code, body := post(t, ts.URL+"/v1/completions", "k", `{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}`)
	if code != 200 {
		t.Fatalf("completion: %d %s", code, body)
	}
	var r struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Choices) != 1 {
		t.Fatalf("completion %s: %v", body, err)
	}
	return r.Choices[0].Text
}

// POST /admin/reload serves new weights of the same shapes: completions then
// equal a fresh server's on them. It is behind the API key, and a model of
// other shapes or none at all is a clear 4xx that changes nothing.
func TestAdminReload(t *testing.T) {
	tok, orig, scaled, fewer := reloadFiles(t)
	fresh := completion(t, sessionServer(t, llama.Source{Model: scaled, Tokenizer: tok}, false))

	ts := sessionServer(t, llama.Source{Model: orig, Tokenizer: tok}, true)
	before := completion(t, ts)
	if before == fresh {
		t.Fatal("the scaled weights give the same completion: the test cannot tell them apart")
	}
	url := ts.URL + "/admin/reload"
	for _, c := range []struct {
		key, body string
		code      int
		want      string
	}{
		{"", `{"model": "` + scaled + `"}`, 401, "invalid_api_key"},
		{"wrong", `{"model": "` + scaled + `"}`, 401, "invalid_api_key"},
		{"k", `{"modle": "x"}`, 400, "invalid_json"},
		{"k", `{}`, 400, "missing_required_parameter"},
		{"k", `{"model": "` + filepath.Join(filepath.Dir(tok), "nonexistent.bin") + `"}`, 400, "nonexistent.bin"},
		{"k", `{"model": "` + fewer + `"}`, 409, "shape_mismatch"},
		// The body is bounded as every other endpoint's.
		{"k", `{"model": "` + strings.Repeat("x", serve.DefaultMaxBodyBytes) + `"}`, 413, "request_too_large"},
	} {
		code, body := post(t, url, c.key, c.body)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("reload %s (key %q): %d %s, want %d naming %s", c.body, c.key, code, body, c.code, c.want)
		}
	}
	if got := completion(t, ts); got != before {
		t.Fatalf("a refused reload changed the completion: %q, was %q", got, before)
	}
	code, body := post(t, url, "k", `{"model": "`+scaled+`"}`)
	if code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	var r struct {
		Updated    int `json:"graph_slots_updated"`
		Recaptured int `json:"graph_slots_recaptured"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Updated == 0 || r.Recaptured != 0 {
		t.Fatalf("reload answered %s (%v): want every graph slot updated in place", body, err)
	}
	if got := completion(t, ts); got != fresh {
		t.Fatalf("after reload: %q, a fresh server on the new weights: %q", got, fresh)
	}
}

// --enable-reload needs an API key.
func TestEnableReloadNeedsAPIKey(t *testing.T) {
	t.Setenv(EnvAPIKey, "")
	code, _, errs := runCLI(t, "serve", "--enable-reload")
	if code != 2 || !strings.Contains(errs, "--api-key") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}
