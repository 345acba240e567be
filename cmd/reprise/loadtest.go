package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func init() {
	register(command{name: "loadtest", summary: "load a running server with streaming completions: throughput and latency per concurrency", run: runLoadtest})
}

const loadtestUsage = `Usage: reprise loadtest [flags]

Sends --requests streaming completions (POST /v1/completions with "stream":
true and stream_options.include_usage) to a running server at each
--concurrency level in turn, with that many clients at once, and reports per
level: throughput (completion tokens per second of the level's wall time),
requests per second, errors, and the p50 and p99 of the time to first token
(from sending the request to the first chunk with text) and of the time per
output token (from the first token to the end, over the tokens after the
first). Percentiles are nearest-rank over the successful requests.

--json prints:

  {"url", "model", "prompt", "max_tokens",
   "levels": [{"concurrency", "requests", "succeeded", "errors",
     "error_samples" (up to 5 distinct error messages),
     "seconds" (wall time of the level), "completion_tokens",
     "tokens_per_s", "requests_per_s",
     "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
     "latency_p50_ms", "latency_p99_ms" (whole request)}]}

It fails (exit 1) only when a level has no successful request.

Flags:
`

// LoadReport is `reprise loadtest --json`'s output.
type LoadReport struct {
	URL       string      `json:"url"`
	Model     string      `json:"model"`
	Prompt    string      `json:"prompt"`
	MaxTokens int         `json:"max_tokens"`
	Levels    []LoadLevel `json:"levels"`
}

// LoadLevel is one concurrency level's results. Latencies are milliseconds;
// percentiles are nearest-rank over the successful requests (0 when none).
type LoadLevel struct {
	Concurrency  int      `json:"concurrency"`       // clients at once
	Requests     int      `json:"requests"`          // requests sent
	Succeeded    int      `json:"succeeded"`         // requests answered in full
	Errors       int      `json:"errors"`            // requests that failed
	ErrorSamples []string `json:"error_samples"`     // up to 5 distinct error messages
	Seconds      float64  `json:"seconds"`           // wall time of the level
	Tokens       int64    `json:"completion_tokens"` // tokens of the successful requests
	TokensPerS   float64  `json:"tokens_per_s"`      // completion tokens / seconds
	RequestsPerS float64  `json:"requests_per_s"`    // succeeded / seconds
	TTFTP50      float64  `json:"ttft_p50_ms"`       // time to first token
	TTFTP99      float64  `json:"ttft_p99_ms"`
	TPOTP50      float64  `json:"tpot_p50_ms"` // time per output token after the first
	TPOTP99      float64  `json:"tpot_p99_ms"`
	LatencyP50   float64  `json:"latency_p50_ms"` // whole request
	LatencyP99   float64  `json:"latency_p99_ms"`
}

// loadResult is one request's measurements.
type loadResult struct {
	ttft    time.Duration // to the first chunk with text
	tpot    time.Duration // per token after the first (0 with one token)
	latency time.Duration
	tokens  int
	err     error
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted
// values: the smallest value at least p% of the values are at or below.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// summarize aggregates one level's results over its wall time.
func summarize(concurrency int, results []loadResult, wall time.Duration) LoadLevel {
	lv := LoadLevel{Concurrency: concurrency, Requests: len(results), Seconds: wall.Seconds(), ErrorSamples: []string{}}
	var ttft, tpot, lat []float64
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, r := range results {
		if r.err != nil {
			lv.Errors++
			if msg := r.err.Error(); len(lv.ErrorSamples) < 5 && !slices.Contains(lv.ErrorSamples, msg) {
				lv.ErrorSamples = append(lv.ErrorSamples, msg)
			}
			continue
		}
		lv.Succeeded++
		lv.Tokens += int64(r.tokens)
		ttft = append(ttft, ms(r.ttft))
		lat = append(lat, ms(r.latency))
		if r.tokens > 1 {
			tpot = append(tpot, ms(r.tpot))
		}
	}
	for _, s := range [][]float64{ttft, tpot, lat} {
		slices.Sort(s)
	}
	lv.TTFTP50, lv.TTFTP99 = percentile(ttft, 50), percentile(ttft, 99)
	lv.TPOTP50, lv.TPOTP99 = percentile(tpot, 50), percentile(tpot, 99)
	lv.LatencyP50, lv.LatencyP99 = percentile(lat, 50), percentile(lat, 99)
	if s := wall.Seconds(); s > 0 {
		lv.TokensPerS = float64(lv.Tokens) / s
		lv.RequestsPerS = float64(lv.Succeeded) / s
	}
	return lv
}

// loadClient sends the load test's requests.
type loadClient struct {
	http    *http.Client
	base    string // the server's URL, without /v1
	apiKey  string
	timeout time.Duration
}

func (c *loadClient) request(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	return c.http.Do(req)
}

// httpError reads an error answer: its status and OpenAI error message.
func httpError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, e.Error.Message)
	}
	return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

// firstModel asks the server which model it serves.
func (c *loadClient) firstModel(ctx context.Context) (string, error) {
	resp, err := c.request(ctx, "GET", "/v1/models", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", httpError(resp)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return "", fmt.Errorf("GET /v1/models: %w", err)
	}
	if len(list.Data) == 0 {
		return "", fmt.Errorf("GET /v1/models lists no model")
	}
	return list.Data[0].ID, nil
}

// stream sends one streaming completion and times it.
func (c *loadClient) stream(ctx context.Context, body []byte) loadResult {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	resp, err := c.request(ctx, "POST", "/v1/completions", body)
	if err != nil {
		return loadResult{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return loadResult{err: httpError(resp)}
	}
	var res loadResult
	var first time.Time
	chunks, usageTokens := 0, -1
	finished, done := false, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var ch struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return loadResult{err: fmt.Errorf("bad chunk %q: %w", data, err)}
		}
		if ch.Error != nil {
			return loadResult{err: fmt.Errorf("error event: %s", ch.Error.Message)}
		}
		if ch.Usage != nil {
			usageTokens = ch.Usage.CompletionTokens
		}
		for _, c := range ch.Choices {
			if c.Text != "" {
				if chunks == 0 {
					first = time.Now()
				}
				chunks++
			}
			if c.FinishReason != nil {
				finished = true
			}
		}
	}
	end := time.Now()
	if err := sc.Err(); err != nil {
		return loadResult{err: err}
	}
	if !done || !finished {
		return loadResult{err: fmt.Errorf("the stream ended without a finish reason and [DONE]")}
	}
	res.tokens = chunks
	if usageTokens >= 0 {
		res.tokens = usageTokens
	}
	res.latency = end.Sub(start)
	if first.IsZero() {
		first = end // nothing printable came: the whole request is the wait
	}
	res.ttft = first.Sub(start)
	if res.tokens > 1 {
		res.tpot = end.Sub(first) / time.Duration(res.tokens-1)
	}
	return res
}

// runLevel sends n requests from concurrency clients at once.
func (c *loadClient) runLevel(ctx context.Context, concurrency, n int, body []byte) LoadLevel {
	results := make([]loadResult, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range min(concurrency, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				results[i] = c.stream(ctx, body)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	for i := range results {
		if results[i].err == nil && results[i].latency == 0 {
			results[i].err = fmt.Errorf("not sent: %w", ctx.Err())
		}
	}
	return summarize(concurrency, results, wall)
}

func runLoadtest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("loadtest", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), loadtestUsage)
		printFlags(fs)
	}
	url := fs.String("url", "http://127.0.0.1:8080", "the server's `URL` (with or without /v1)")
	levels := intList{1, 8, 64}
	fs.Var(&levels, "concurrency", "concurrency levels, comma-separated: clients sending at once")
	requests := fs.Int("requests", 64, "requests per concurrency level")
	maxTokens := fs.Int("max-tokens", 64, "max_tokens of each request")
	prompt := fs.String("prompt", "Once upon a time", "the prompt of each request")
	temperature := fs.Float64("temperature", 0, "temperature of each request (0: greedy)")
	model := fs.String("model", "", "model to ask for (default: the first GET /v1/models lists)")
	apiKey := fs.String("api-key", "", "API key, sent as \"Authorization: Bearer KEY\" (default $"+EnvAPIKey+")")
	timeout := fs.Duration("timeout", 5*time.Minute, "limit on each request")
	asJSON := fs.Bool("json", false, "print the report as JSON (fields in the help above)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *requests < 1 || *maxTokens < 1 || *timeout <= 0 || *temperature < 0 {
		return fmt.Errorf("%w: --requests and --max-tokens at least 1, --timeout positive, --temperature >= 0", errUsage)
	}
	if *apiKey == "" {
		*apiKey = os.Getenv(EnvAPIKey)
	}
	base := strings.TrimSuffix(strings.TrimSuffix(*url, "/"), "/v1")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return fmt.Errorf("%w: --url %q: want http://host:port", errUsage, *url)
	}
	maxLevel := slices.Max(levels)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = maxLevel, maxLevel
	defer tr.CloseIdleConnections()
	c := &loadClient{http: &http.Client{Transport: tr}, base: base, apiKey: *apiKey, timeout: *timeout}

	if *model == "" {
		m, err := c.firstModel(ctx)
		if err != nil {
			return fmt.Errorf("asking the server for its model: %w", err)
		}
		*model = m
	}
	body, err := json.Marshal(map[string]any{"model": *model, "prompt": *prompt, "max_tokens": *maxTokens,
		"temperature": *temperature, "stream": true, "stream_options": map[string]bool{"include_usage": true}})
	if err != nil {
		return err
	}
	rep := LoadReport{URL: base, Model: *model, Prompt: *prompt, MaxTokens: *maxTokens}
	if !*asJSON {
		fmt.Fprintf(stdout, "%s, model %s, %d requests of at most %d tokens per level\n\n", base, *model, *requests, *maxTokens)
		fmt.Fprintf(stdout, "%11s %8s %6s %9s %7s %10s %10s %10s %10s\n", "concurrency", "requests", "errors", "tok/s", "req/s",
			"ttft p50", "ttft p99", "tpot p50", "tpot p99")
	}
	var failed error
	for _, n := range levels {
		lv := c.runLevel(ctx, n, *requests, body)
		rep.Levels = append(rep.Levels, lv)
		if !*asJSON {
			fmt.Fprintf(stdout, "%11d %8d %6d %9.1f %7.2f %10s %10s %10s %10s\n", lv.Concurrency, lv.Requests, lv.Errors,
				lv.TokensPerS, lv.RequestsPerS, fmtMS(lv.TTFTP50), fmtMS(lv.TTFTP99), fmtMS(lv.TPOTP50), fmtMS(lv.TPOTP99))
			for _, e := range lv.ErrorSamples {
				fmt.Fprintf(stdout, "%11s error: %s\n", "", e)
			}
		}
		if lv.Succeeded == 0 && failed == nil {
			failed = fmt.Errorf("no request succeeded at concurrency %d: %s", n, strings.Join(lv.ErrorSamples, "; "))
		}
		if ctx.Err() != nil {
			break
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
	return failed
}

func fmtMS(ms float64) string {
	return time.Duration(ms * float64(time.Millisecond)).Round(10 * time.Microsecond).String()
}
