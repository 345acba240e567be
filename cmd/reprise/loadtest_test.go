package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/serve"
)

func TestPercentile(t *testing.T) {
	vals := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct{ p, want float64 }{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {10, 1}, {1, 1}, {55, 6}} {
		if got := percentile(vals, tc.p); got != tc.want {
			t.Errorf("p%v of 1..10 = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v", got)
	}
	if got := percentile([]float64{7}, 99); got != 7 {
		t.Errorf("p99 of one = %v", got)
	}
	// 100 values: p99 is the 99th, not the largest.
	var hundred []float64
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, float64(i))
	}
	if got := percentile(hundred, 99); got != 99 {
		t.Errorf("p99 of 1..100 = %v, want 99", got)
	}
}

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	results := []loadResult{
		{ttft: 10 * ms, tpot: 2 * ms, latency: 30 * ms, tokens: 11},
		{ttft: 30 * ms, tpot: 4 * ms, latency: 70 * ms, tokens: 11},
		{ttft: 20 * ms, latency: 20 * ms, tokens: 1}, // one token: no time per output token
		{err: errors.New("HTTP 429: queue full")},
		{err: errors.New("HTTP 429: queue full")},
		{err: errors.New("connection refused")},
	}
	lv := summarize(8, results, 2*time.Second)
	want := LoadLevel{Concurrency: 8, Requests: 6, Succeeded: 3, Errors: 3,
		ErrorSamples: []string{"HTTP 429: queue full", "connection refused"}, Seconds: 2, Tokens: 23,
		TokensPerS: 11.5, RequestsPerS: 1.5, TTFTP50: 20, TTFTP99: 30, TPOTP50: 2, TPOTP99: 4, LatencyP50: 30, LatencyP99: 70}
	if fmt.Sprintf("%+v", lv) != fmt.Sprintf("%+v", want) {
		t.Errorf("summary\n%+v\nwant\n%+v", lv, want)
	}
	// The JSON fields the help documents.
	b, _ := json.Marshal(lv)
	for _, f := range []string{"concurrency", "requests", "succeeded", "errors", "error_samples", "seconds", "completion_tokens",
		"tokens_per_s", "requests_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "latency_p50_ms", "latency_p99_ms"} {
		if !strings.Contains(string(b), `"`+f+`":`) || !strings.Contains(loadtestUsage, `"`+f+`"`) {
			t.Errorf("field %q missing from the JSON or the help", f)
		}
	}
}

// testServer is a real server (engine without graphs, on the CPU device)
// for the command tests.
func testServer(t *testing.T, eo engine.Options, so serve.Options) *httptest.Server {
	t.Helper()
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	m, tok, err := llama.Open(dev, llama.Source{}, llama.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(dev, m, eo)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv, err := serve.New(e, m.Info(), tok, so)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		e.Close()
		cancel()
		m.Close()
		dev.Close()
	})
	return ts
}

// loadtest against a real server, end to end, with tiny numbers.
func TestLoadtestEndToEnd(t *testing.T) {
	ts := testServer(t, engine.Options{}, serve.Options{APIKey: "k"})
	var out, errb strings.Builder
	code := run(context.Background(), []string{"loadtest", "--url", ts.URL + "/v1", "--concurrency", "1,4", "--requests", "6",
		"--max-tokens", "5", "--api-key", "k", "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	var rep LoadReport
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if rep.Model != "stories260K" || rep.MaxTokens != 5 || len(rep.Levels) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for i, lv := range rep.Levels {
		if lv.Concurrency != []int{1, 4}[i] || lv.Requests != 6 || lv.Succeeded != 6 || lv.Errors != 0 ||
			lv.Tokens != 30 || lv.TokensPerS <= 0 || lv.TTFTP50 <= 0 || lv.TTFTP99 < lv.TTFTP50 || lv.TPOTP50 <= 0 {
			t.Errorf("level %+v", lv)
		}
	}

	// Text output, and errors counted: a wrong key fails every request.
	out.Reset()
	errb.Reset()
	code = run(context.Background(), []string{"loadtest", "--url", ts.URL, "--concurrency", "2", "--requests", "2",
		"--max-tokens", "3", "--api-key", "k", "--model", "stories260K"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "tok/s") || !strings.Contains(out.String(), "ttft p99") {
		t.Errorf("text report (exit %d): %s%s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	code = run(context.Background(), []string{"loadtest", "--url", ts.URL, "--concurrency", "2", "--requests", "2",
		"--api-key", "wrong", "--model", "stories260K", "--json"}, &out, &errb)
	if code != 1 || !strings.Contains(out.String(), `"errors": 2`) || !strings.Contains(errb.String(), "HTTP 401") {
		t.Errorf("wrong key (exit %d): %s%s", code, out.String(), errb.String())
	}
}

// Refusals, error events and cut streams count as errors of their level,
// not as a failed run (against a scripted server).
func TestLoadtestCountsErrors(t *testing.T) {
	var n atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[{"id":"m"}]}`)
			return
		}
		var body map[string]any
		if json.NewDecoder(r.Body).Decode(&body); body["model"] != "m" || body["stream"] != true {
			http.Error(w, "bad request", 400)
			return
		}
		switch n.Add(1) % 4 {
		case 0:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			io.WriteString(w, `{"error":{"message":"busy","type":"rate_limit_error","param":null,"code":"queue_full"}}`)
			return
		case 1:
			io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}\n\ndata: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n")
			return
		case 2:
			io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":null}]}\n\n") // cut short
			return
		}
		for _, c := range []string{`{"choices":[{"text":"a","finish_reason":null}]}`, `{"choices":[{"text":"b","finish_reason":null}]}`,
			`{"choices":[{"text":"","finish_reason":"length"}]}`, `{"choices":[],"usage":{"completion_tokens":2}}`, `[DONE]`} {
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	}))
	defer ts.Close()
	var out, errb strings.Builder
	code := run(context.Background(), []string{"loadtest", "--url", ts.URL, "--concurrency", "3", "--requests", "8", "--json"}, &out, &errb)
	var rep LoadReport
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s%s", code, err, out.String(), errb.String())
	}
	lv := rep.Levels[0]
	samples := strings.Join(lv.ErrorSamples, "|")
	if lv.Requests != 8 || lv.Succeeded != 2 || lv.Errors != 6 || lv.Tokens != 4 || lv.TPOTP50 <= 0 ||
		!strings.Contains(samples, "HTTP 429: busy") || !strings.Contains(samples, "error event: boom") || !strings.Contains(samples, "without a finish reason") {
		t.Errorf("level %+v", lv)
	}
}
