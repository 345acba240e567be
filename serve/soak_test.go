package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/serve"
)

// EnvSoak makes TestSoak run for a minute instead of a few seconds.
const EnvSoak = "REPRISE_SOAK"

// soakCounts are what a soak did.
type soakCounts struct {
	sent, finished, cancelled, streamed, tokens atomic.Int64
}

// soakRequest sends one request with random parameters, and leaves early
// at random. It returns an error for anything but a clean answer or a
// departure the client chose.
func soakRequest(ctx context.Context, rng *rand.Rand, hc *http.Client, url string, c *soakCounts) error {
	stream := rng.IntN(2) == 0
	p := map[string]any{"prompt": loadPrompts(32)[rng.IntN(32)], "max_tokens": 1 + rng.IntN(64), "stream": stream}
	if rng.IntN(2) == 0 {
		p["temperature"] = 0
	} else {
		p["temperature"], p["top_p"], p["top_k"], p["seed"] = rng.Float64()*1.5, 0.1+0.9*rng.Float64(), rng.IntN(40), rng.IntN(1000)
	}
	if rng.IntN(4) == 0 {
		p["stop"] = []string{[]string{" the", ".", "\n", "and"}[rng.IntN(4)]}
	}
	if stream && rng.IntN(3) == 0 {
		p["stream_options"] = map[string]any{"include_usage": true}
	}
	leave := rng.IntN(4) == 0
	if leave {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(30))*time.Millisecond)
		defer cancel()
	}
	b, _ := json.Marshal(p)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	c.sent.Add(1)
	resp, err := hc.Do(req)
	if err != nil {
		if leave || ctx.Err() != nil {
			c.cancelled.Add(1)
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		if leave || ctx.Err() != nil {
			c.cancelled.Add(1)
			return nil
		}
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d: %s", b, resp.StatusCode, body)
	}
	if !stream {
		var r struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(body, &r) != nil || len(r.Choices) != 1 || r.Choices[0].FinishReason == "" {
			return fmt.Errorf("%s: not a completion: %s", b, body)
		}
		c.tokens.Add(int64(r.Usage.CompletionTokens))
		c.finished.Add(1)
		return nil
	}
	// Exactly one final event, then [DONE] last.
	finals, done := 0, false
	for _, line := range strings.Split(string(body), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		switch {
		case !ok:
		case done:
			return fmt.Errorf("%s: an event after [DONE]", b)
		case data == "[DONE]":
			done = true
		case strings.Contains(data, `"error"`):
			return fmt.Errorf("%s: an error event: %s", b, data)
		case strings.Contains(data, `"finish_reason":"`):
			finals++
		case strings.Contains(data, `"text":`):
			c.tokens.Add(1)
		}
	}
	if finals != 1 || !done {
		return fmt.Errorf("%s: %d final events, [DONE] %v", b, finals, done)
	}
	c.streamed.Add(1)
	c.finished.Add(1)
	return nil
}

// probes are fixed requests whose answers a soaked server must give as a
// fresh one does: greedy and seeded, whole and streamed.
var probes = []string{
	`{"prompt":"Once upon a time","max_tokens":48,"temperature":0}`,
	`{"prompt":"The dog","max_tokens":48,"temperature":0.8,"top_p":0.9,"seed":7}`,
	`{"prompt":"Lily and Tom","max_tokens":32,"temperature":1,"top_k":20,"seed":3,"stream":true}`,
}

func probe(t *testing.T, url string) []string {
	t.Helper()
	var out []string
	for _, p := range probes {
		code, _, body := post(t, url, "/v1/completions", p)
		if code != http.StatusOK {
			t.Fatalf("probe %s: %d %s", p, code, body)
		}
		// The text only: ids and timestamps differ.
		var text strings.Builder
		for _, line := range strings.Split(string(body), "\n") {
			data := strings.TrimPrefix(line, "data: ")
			var r struct {
				Choices []struct {
					Text string `json:"text"`
				} `json:"choices"`
			}
			if json.Unmarshal([]byte(data), &r) == nil && len(r.Choices) == 1 {
				text.WriteString(r.Choices[0].Text)
			}
		}
		out = append(out, text.String())
	}
	return out
}

// 64 streaming and whole clients with random parameters and random
// departures, for a few seconds (a minute with REPRISE_SOAK=1): every
// request answered cleanly, then no KV page held, no goroutine left over,
// and the probes answered as a fresh server answers them.
func TestSoak(t *testing.T) {
	dur := 2 * time.Second
	if os.Getenv(EnvSoak) == "1" {
		dur = 60 * time.Second
	}
	v, err := newEnv(engine.Options{Graphs: true, BackgroundCapture: true, PlanCache: "off"}, serve.Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer v.close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	hc := &http.Client{Transport: tr}
	goroutines := runtime.NumGoroutine()
	var c soakCounts
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	start := time.Now()
	for i := range 64 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 99))
			for ctx.Err() == nil {
				if err := soakRequest(ctx, rng, hc, v.ts.URL, &c); err != nil && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for i, err := range failures {
		if i < 5 {
			t.Error(err)
		}
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed", len(failures), c.sent.Load())
	}
	waitIdle(t, v)
	tr.CloseIdleConnections()
	// Handlers and connections wind down once their clients are gone.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines+2 {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after the soak, %d before:\n%s", n, goroutines, buf[:runtime.Stack(buf, true)])
	}
	st := v.e.Stats()
	t.Logf("soak %s: %d requests (%d finished, %d streamed, %d left early), %d tokens, %d KV pages held after, %d live buckets",
		elapsed.Round(time.Millisecond), c.sent.Load(), c.finished.Load(), c.streamed.Load(), c.cancelled.Load(), c.tokens.Load(),
		st.KVPagesUsed, v.e.LiveBuckets())
	if c.finished.Load() == 0 || c.cancelled.Load() == 0 {
		t.Fatalf("the soak proves little: %d finished, %d left early", c.finished.Load(), c.cancelled.Load())
	}
	got := probe(t, v.ts.URL)
	fresh, err := newEnv(engine.Options{PlanCache: "off"}, serve.Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.close()
	want := probe(t, fresh.ts.URL)
	for i := range probes {
		if got[i] != want[i] {
			t.Errorf("probe %s after the soak:\n%q\na fresh server:\n%q", probes[i], got[i], want[i])
		}
	}
}
