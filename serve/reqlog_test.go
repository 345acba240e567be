package serve_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/serve"
)

// syncBuffer is a log sink the handler's goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines are the JSON log lines whose msg is "request".
func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		if m["msg"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

// Every request writes one log line with its id, endpoint, status and, for
// a generation, its model, finish reason, token counts and times; the id
// is the client's X-Request-Id, echoed, and ends the completion's id.
func TestRequestLogAndIDs(t *testing.T) {
	var logs syncBuffer
	ts := withServer(t, serve.Options{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	code, hdr, body := post(t, ts.URL, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":5,"temperature":0}`,
		"X-Request-Id", "client-id-42")
	if code != http.StatusOK || hdr.Get("X-Request-Id") != "client-id-42" {
		t.Fatalf("status %d, X-Request-Id %q: %s", code, hdr.Get("X-Request-Id"), body)
	}
	var res struct {
		ID                string `json:"id"`
		SystemFingerprint string `json:"system_fingerprint"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if res.ID != "cmpl-client-id-42" || !strings.HasPrefix(res.SystemFingerprint, "fp_") {
		t.Errorf("id %q, system_fingerprint %q", res.ID, res.SystemFingerprint)
	}

	// A chat stream: every chunk carries the id and the fingerprint.
	code, hdr, body = post(t, ts.URL, "/v1/chat/completions",
		`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"temperature":0,"stream":true}`)
	id := hdr.Get("X-Request-Id")
	if code != http.StatusOK || len(id) < 16 {
		t.Fatalf("status %d, X-Request-Id %q", code, id)
	}
	for _, ev := range sseEvents(t, bytes.NewReader(body)) {
		if ev == "[DONE]" {
			continue
		}
		var c struct {
			ID                string `json:"id"`
			SystemFingerprint string `json:"system_fingerprint"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil || c.ID != "chatcmpl-"+id || c.SystemFingerprint != res.SystemFingerprint {
			t.Errorf("chunk %s: id %q fingerprint %q (%v)", ev, c.ID, c.SystemFingerprint, err)
		}
	}

	// Refused and unknown requests are logged too; an unusable id is replaced.
	code, hdr, _ = post(t, ts.URL, "/v1/completions", `{"prompt":"x","bogus":1}`, "X-Request-Id", "has space")
	if code != http.StatusBadRequest || hdr.Get("X-Request-Id") == "has space" || hdr.Get("X-Request-Id") == "" {
		t.Errorf("status %d, X-Request-Id %q", code, hdr.Get("X-Request-Id"))
	}
	get(t, ts.URL, "/nowhere")
	get(t, ts.URL, "/health")

	lines := logs.lines(t)
	if len(lines) != 5 {
		t.Fatalf("%d request log lines, want 5: %v", len(lines), lines)
	}
	first := lines[0]
	for k, want := range map[string]any{"request_id": "client-id-42", "endpoint": "/v1/completions", "status": 200.0,
		"model": "stories260K", "finish_reason": "length", "output_tokens": 5.0, "method": "POST"} {
		if first[k] != want {
			t.Errorf("log %s = %v, want %v", k, first[k], want)
		}
	}
	for _, k := range []string{"prompt_tokens", "queue_s", "ttft_s", "total_s"} {
		if v, ok := first[k].(float64); !ok || v <= 0 {
			t.Errorf("log %s = %v, want a positive number", k, first[k])
		}
	}
	if c, _ := first["client"].(string); !strings.HasPrefix(c, "127.0.0.1:") {
		t.Errorf("log client %q", first["client"])
	}
	if lines[1]["request_id"] != id || lines[1]["endpoint"] != "/v1/chat/completions" {
		t.Errorf("chat log line %v", lines[1])
	}
	for i, want := range []struct {
		endpoint string
		status   float64
		level    string
	}{{"/v1/completions", 400, "INFO"}, {"other", 404, "INFO"}, {"/health", 200, "DEBUG"}} {
		l := lines[2+i]
		if l["endpoint"] != want.endpoint || l["status"] != want.status || l["level"] != want.level {
			t.Errorf("log line %d: %v, want endpoint %s status %v level %s", 2+i, l, want.endpoint, want.status, want.level)
		}
		if _, ok := l["finish_reason"]; ok {
			t.Errorf("log line %d of a request that generated nothing has a finish reason: %v", 2+i, l)
		}
	}
}
