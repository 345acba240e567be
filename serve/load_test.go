package serve_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// streamCompletion streams a greedy completion with the official client and
// returns its text and finish reason.
func streamCompletion(c openai.Client, prompt string, maxTokens int) (string, string, error) {
	s := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model:       "stories260K",
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens:   openai.Int(int64(maxTokens)),
		Temperature: openai.Float(0),
	})
	defer s.Close()
	var text strings.Builder
	finish := ""
	for s.Next() {
		ch := s.Current()
		if len(ch.Choices) == 0 {
			continue
		}
		text.WriteString(ch.Choices[0].Text)
		if ch.Choices[0].FinishReason != "" {
			finish = string(ch.Choices[0].FinishReason)
		}
	}
	if err := s.Err(); err != nil {
		return "", "", err
	}
	if finish == "" {
		return "", "", fmt.Errorf("stream ended without a finish reason")
	}
	return text.String(), finish, nil
}

func loadPrompts(n int) []string {
	starts := []string{"Once upon a time", "One day", "Lily and Tom", "The dog", "There was a big", "Tim saw a", "Sue liked to", "The sun was"}
	things := []string{"ball", "cat", "tree", "boat", "cake", "bird", "park", "box"}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s %s", starts[i%len(starts)], things[(i/len(starts))%len(things)])
	}
	return out
}

// 64 concurrent streaming clients on loopback: no errors, no lost request,
// and every client's greedy text equal to what it gets alone.
func TestLoad64ConcurrentStreams(t *testing.T) {
	v := sharedEnv(t)
	c := client(v.ts.URL)
	const n, maxTokens = 64, 24
	prompts := loadPrompts(n)
	alone := make([]string, n)
	for i, p := range prompts {
		text, _, err := streamCompletion(c, p, maxTokens)
		if err != nil {
			t.Fatalf("alone %q: %v", p, err)
		}
		alone[i] = text
	}
	for _, i := range []int{0, 13, 63} {
		if want := v.reference(t, prompts[i], maxTokens); alone[i] != want {
			t.Errorf("alone %q: %q, want the reference's %q", prompts[i], alone[i], want)
		}
	}
	before := v.e.Stats()

	var wg sync.WaitGroup
	start := make(chan struct{})
	texts, errs := make([]string, n), make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			texts[i], _, errs[i] = streamCompletion(c, prompts[i], maxTokens)
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	for i := range n {
		if errs[i] != nil {
			t.Errorf("client %d: %v", i, errs[i])
		} else if texts[i] != alone[i] {
			t.Errorf("client %d (%q): %q together, %q alone", i, prompts[i], texts[i], alone[i])
		}
	}
	after := v.e.Stats()
	if got := after.Finished - before.Finished; got != n {
		t.Errorf("the engine finished %d requests, want %d", got, n)
	}
	// The requests were batched: decode steps carried several rows each.
	steps, rows := int64(0), int64(0)
	for _, st := range after.Steps {
		if st.Walk == "decode" {
			steps += st.Steps
			rows += st.Rows
		}
	}
	for _, st := range before.Steps {
		if st.Walk == "decode" {
			steps -= st.Steps
			rows -= st.Rows
		}
	}
	if steps == 0 || rows/steps < 4 {
		t.Errorf("%d decode steps carried %d rows: not batched", steps, rows)
	}
	t.Logf("%d streams of %d tokens in %v: %d decode steps, %.1f rows each", n, maxTokens, elapsed, steps, float64(rows)/float64(steps))
	waitIdle(t, v)
}

// waitIdle waits until the engine holds no request and no KV page.
func waitIdle(t testing.TB, v *env) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := v.e.Stats()
		if st.KVPagesUsed == 0 && st.Running == 0 && st.Waiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not idle: %+v", st)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A client that disconnects mid-stream (or gives up on a whole answer)
// cancels its request: the engine drops it before its next step and its KV
// pages free. Generation is fast enough that a request may end on its own
// before the cancel arrives; such an attempt proves nothing and is made
// again, so the test does not depend on the device's speed.
func TestDisconnectFreesPages(t *testing.T) {
	v := sharedEnv(t)
	const body = `{"prompt":"Once upon a time","max_tokens":400,"temperature":0%s}`
	cancelledKey := []string{"endpoint", "/v1/completions", "reason", "cancelled"}
	for _, stream := range []bool{true, false} {
		cancelled := false
		for attempt := 0; attempt < 20 && !cancelled; attempt++ {
			waitIdle(t, v)
			counted := metricValue(t, v.ts.URL, "reprise_requests_finished_total", cancelledKey...)
			before := v.e.Stats()
			cctx, cancel := context.WithCancel(context.Background())
			extra := ""
			if stream {
				extra = `,"stream":true`
			}
			req, _ := http.NewRequestWithContext(cctx, "POST", v.ts.URL+"/v1/completions", strings.NewReader(fmt.Sprintf(body, extra)))
			req.Header.Set("Content-Type", "application/json")
			done := make(chan error, 1)
			first := make(chan struct{})
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err == nil && stream {
					// Read up to the first chunk with text, then leave.
					r := bufio.NewReader(resp.Body)
					for {
						line, rerr := r.ReadString('\n')
						if rerr != nil {
							err = rerr
							break
						}
						if strings.HasPrefix(line, "data: {") && !strings.Contains(line, `"text":""`) {
							break
						}
					}
					close(first)
					<-cctx.Done()
					resp.Body.Close()
				} else if err == nil {
					resp.Body.Close()
				}
				done <- err
			}()
			if stream {
				<-first
			} else {
				// Wait until the request holds pages, then give up.
				for st := v.e.Stats(); st.KVPagesUsed == 0 && st.Finished == before.Finished; st = v.e.Stats() {
					runtime.Gosched()
				}
			}
			cancel()
			<-done
			// The engine publishes its counters between steps: wait for the
			// request to have ended, then for the pages to show free.
			deadline := time.Now().Add(5 * time.Second)
			for v.e.Stats().Finished == before.Finished {
				if time.Now().After(deadline) {
					t.Fatalf("stream %v: the request never ended", stream)
				}
				time.Sleep(time.Millisecond)
			}
			waitIdle(t, v)
			after := v.e.Stats()
			if after.Finished-before.Finished != 1 {
				t.Fatalf("stream %v: %d requests finished", stream, after.Finished-before.Finished)
			}
			// Once the handler has returned, the server counts a cancel.
			deadline = time.Now().Add(2 * time.Second)
			for metricValue(t, v.ts.URL, "reprise_requests_finished_total", cancelledKey...) == counted && time.Now().Before(deadline) {
				time.Sleep(2 * time.Millisecond)
			}
			cancelled = metricValue(t, v.ts.URL, "reprise_requests_finished_total", cancelledKey...) == counted+1
			if cancelled && after.KVPagesUsed != 0 {
				t.Fatalf("stream %v: %d KV pages still used after the cancel", stream, after.KVPagesUsed)
			}
		}
		if !cancelled {
			t.Fatalf("stream %v: in 20 attempts the request always ended before the client left", stream)
		}
	}
}
