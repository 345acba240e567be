package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a buffer the command writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var listening = regexp.MustCompile(`reprise serve: listening on (http://\S+)`)

// startServe runs `reprise serve args...` until the returned stop is called,
// and returns its URL once it listens.
func startServe(t *testing.T, args ...string) (url string, stderr *syncBuffer, stop func() int) {
	t.Helper()
	t.Setenv("REPRISE_LOG", "info")
	ctx, cancel := context.WithCancel(context.Background())
	stderr = &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...), io.Discard, stderr)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := listening.FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case code := <-done:
			cancel()
			t.Fatalf("serve exited %d before listening: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve never listened: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var once sync.Once
	code := 0
	stop = func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("serve did not stop: %s", stderr.String())
			}
		})
		return code
	}
	t.Cleanup(func() { stop() })
	return url, stderr, stop
}

// `reprise serve` on the embedded model with a YAML config: completions and
// streaming over the network, the API key from the file, then a graceful
// shutdown that lets a request in flight finish.
func TestServeCommand(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "serve.yaml")
	if err := os.WriteFile(cfg, []byte("api_key: from-file\ngraphs: off\nmax_tokens: 300\nmax_body_bytes: 64KiB\nshutdown_timeout: 30s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	url, stderr, stop := startServe(t, "--config", cfg)
	auth := "Bearer from-file"
	req := func(body string) (*http.Response, error) {
		r, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", auth)
		return http.DefaultClient.Do(r)
	}
	resp, err := req(`{"model":"stories260K","prompt":"Once upon a time","max_tokens":16,"temperature":0}`)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(res.Choices) != 1 || !strings.HasPrefix(res.Choices[0].Text, ", there was a little girl") || res.Usage.CompletionTokens != 16 {
		t.Fatalf("completion: %d %+v", resp.StatusCode, res)
	}
	// The cap from the file.
	resp, err = req(`{"prompt":"x","max_tokens":301}`)
	if err != nil || resp.StatusCode != 400 {
		t.Errorf("max_tokens over the file's cap: %v %v", err, resp.StatusCode)
	}
	resp.Body.Close()
	auth = "Bearer wrong"
	if resp, err = req(`{"prompt":"x"}`); err != nil || resp.StatusCode != 401 {
		t.Errorf("wrong key: %v %v", err, resp.StatusCode)
	}
	resp.Body.Close()
	auth = "Bearer from-file"

	// A stream in flight when the signal comes finishes, then the server
	// stops.
	resp, err = req(`{"prompt":"Once upon a time","max_tokens":200,"temperature":0,"stream":true}`)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v", err)
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q %v", line, err)
	}
	stopped := make(chan int, 1)
	go func() { stopped <- stop() }()
	rest, err := io.ReadAll(r)
	resp.Body.Close()
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || !strings.Contains(string(rest), `"finish_reason":"`) {
		t.Errorf("the stream in flight did not finish: %v: %q", err, rest)
	}
	if code := <-stopped; code != 0 {
		t.Errorf("serve exited %d: %s", code, stderr.String())
	}
	for _, want := range []string{"shutting down", "msg=stopped"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q: %s", want, stderr.String())
		}
	}
}

// Graphs on, captured in the background while the server already answers;
// capture progress shows as log lines when stderr is not a terminal.
func TestServeBackgroundCapture(t *testing.T) {
	// A context of 64 positions: three prefill lengths to capture, not five.
	url, stderr, stop := startServe(t, "--max-batch", "2", "--plan-cache", "off", "--max-model-len", "64")
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Lily","max_tokens":8,"temperature":0}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("completion: %v", err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(120 * time.Second)
	for !strings.Contains(stderr.String(), "msg=\"graph captured\"") {
		if time.Now().After(deadline) {
			t.Fatalf("no capture progress: %s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(stderr.String(), "eager while graphs are captured in the background") {
		t.Errorf("mode not logged: %s", stderr.String())
	}
	if code := stop(); code != 0 {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
}

// --debug-listen serves the profiler on its own address, and only there.
func TestServeDebugListen(t *testing.T) {
	url, stderr, stop := startServe(t, "--graphs", "off", "--debug-listen", "127.0.0.1:0")
	m := regexp.MustCompile(`profiler on (http://\S+)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no profiler address: %s", stderr.String())
	}
	for _, tc := range []struct {
		url  string
		want int
	}{{m[1], 200}, {m[1] + "cmdline", 200}, {url + "/debug/pprof/", 404}} {
		resp, err := http.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s: %d, want %d", tc.url, resp.StatusCode, tc.want)
		}
	}
	if code := stop(); code != 0 {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
}

// Flags override the environment, which overrides the file.
func TestServeConfigPrecedence(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte("api_key: file\nmax_batch: 8\nmax_queue: 9\nverbose: true\ndevice_memory_fraction: 0.5\n"), 0o644)
	parseServe := func(args ...string) (*serveFlags, error) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f serveFlags
		f.register(fs)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return &f, f.applyConfig(fs)
	}
	t.Setenv(EnvAPIKey, "")
	f, err := parseServe("--config", cfg, "--max-queue", "3")
	if err != nil {
		t.Fatal(err)
	}
	if f.apiKey != "file" || f.maxBatch != 8 || f.maxQueue != 3 || !f.df.verbose || f.df.fraction != 0.5 || !bool(f.graphs) {
		t.Errorf("file, then flags: %+v", f)
	}
	t.Setenv(EnvAPIKey, "env")
	if f, _ = parseServe("--config", cfg); f.apiKey != "env" {
		t.Errorf("environment over file: %q", f.apiKey)
	}
	if f, _ = parseServe("--config", cfg, "--api-key", "flag"); f.apiKey != "flag" {
		t.Errorf("flag over environment: %q", f.apiKey)
	}
	for _, bad := range []string{"nosuch: 1\n", "max_batch: lots\n", "graphs: maybe\n", "listen: [a, b]\n", "config: x\n", ": :\n"} {
		os.WriteFile(cfg, []byte(bad), 0o644)
		if _, err := parseServe("--config", cfg); err == nil {
			t.Errorf("config %q accepted", bad)
		}
	}
	if _, err := parseServe("--config", filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("a missing config file accepted")
	}
}
