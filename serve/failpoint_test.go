//go:build reprise_failpoints

package serve_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
	"github.com/reprise-ml/reprise/internal/failpoint"
	"github.com/reprise-ml/reprise/serve"
)

// The allocator's own words: a 500 must not show them.
var errInjectedOOM = fmt.Errorf("alloc: 512 bytes (a 2097152-byte segment) in pool 0: device free 0 of 25165824: %w", accel.ErrOutOfMemory)

// outcome is how one request ended: its text and finish reason, or
// "error" with the error's message.
type outcome struct {
	text, finish, message string
}

// request sends a greedy completion and checks that it ends with exactly
// one final event: a response or an error body, or for a stream one chunk
// with finish_reason or one error event, then [DONE].
func request(t *testing.T, url, prompt string, maxTokens int, stream bool) outcome {
	t.Helper()
	body := fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":0,"stream":%v}`, prompt, maxTokens, stream)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Errorf("%q: %v", prompt, err)
		return outcome{finish: "lost"}
	}
	defer resp.Body.Close()
	if !stream {
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			e := decodeErr(t, b)
			return outcome{finish: "error", message: e.Error.Message}
		}
		var c struct {
			Choices []struct {
				Text         string `json:"text"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if json.Unmarshal(b, &c) != nil || len(c.Choices) != 1 || c.Choices[0].FinishReason == "" {
			t.Errorf("%q: not a completion: %s", prompt, b)
		}
		return outcome{text: c.Choices[0].Text, finish: c.Choices[0].FinishReason}
	}
	events := sseEvents(t, resp.Body)
	var o outcome
	finals := 0
	for i, ev := range events {
		if ev == "[DONE]" {
			if i != len(events)-1 || finals != 1 {
				t.Errorf("%q: [DONE] at event %d of %d after %d final events", prompt, i, len(events), finals)
			}
			return o
		}
		var c struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Errorf("%q: event %q: %v", prompt, ev, err)
			continue
		}
		switch {
		case c.Error != nil:
			finals++
			o.finish, o.message = "error", c.Error.Message
		case len(c.Choices) == 1 && c.Choices[0].FinishReason != nil:
			finals++
			o.finish = *c.Choices[0].FinishReason
		case len(c.Choices) == 1:
			o.text += c.Choices[0].Text
		}
	}
	t.Errorf("%q: the stream ended without [DONE] (%d events, %d final)", prompt, len(events), finals)
	return outcome{finish: "lost"}
}

// burst sends n requests at once, half of them streamed.
func burst(t *testing.T, url string, n, maxTokens int) []outcome {
	prompts := loadPrompts(n)
	out := make([]outcome, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i] = request(t, url, prompts[i], maxTokens, i%2 == 0) })
	}
	wg.Wait()
	return out
}

// checkHealthy checks that the engine serves after a fault: a fixed
// greedy probe equals the reference, and no KV page is left behind.
func checkHealthy(t *testing.T, v *env) {
	t.Helper()
	failpoint.Reset()
	for _, stream := range []bool{false, true} {
		o := request(t, v.ts.URL, "Once upon a time", 32, stream)
		if want := v.reference(t, "Once upon a time", 32); o.text != want || o.finish != "length" {
			t.Errorf("after the fault (stream %v): %+v, want %q", stream, o, want)
		}
	}
	waitIdle(t, v)
}

// checkOutcomes checks that a fault failed some requests with a plain 500
// (no allocator or device words) and that the rest finished normally.
func checkOutcomes(t *testing.T, os []outcome, wantErrors bool) {
	t.Helper()
	errs := 0
	for _, o := range os {
		switch o.finish {
		case "length", "stop":
		case "error":
			errs++
			if strings.Contains(o.message, "pool") || strings.Contains(o.message, "segment") || !strings.Contains(o.message, "internal server error") {
				t.Errorf("an error tells the client the server's insides: %q", o.message)
			}
		default:
			t.Errorf("an outcome %+v", o)
		}
	}
	if wantErrors && errs == 0 {
		t.Error("the fault failed no request")
	}
	t.Logf("%d requests, %d failed by the fault", len(os), errs)
}

func failpointEnv(t *testing.T, so serve.Options) *env {
	t.Helper()
	v, err := newEnv(engine.Options{Graphs: true, PlanCache: "off"}, so, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.close)
	return v
}

func TestFailpointAllocDuringCapture(t *testing.T) {
	defer failpoint.Reset()
	hook, fired := failpoint.FailNth(3, failpoint.PhaseCapture, errInjectedOOM)
	failpoint.Enable(failpoint.Alloc, hook)
	v := failpointEnv(t, serve.Options{})
	failpoint.Reset()
	if !fired() {
		t.Fatal("no allocation failed during capture")
	}
	// The bucket that failed serves eager; every request finishes.
	checkOutcomes(t, burst(t, v.ts.URL, 8, 24), false)
	checkHealthy(t, v)
}

// faultBurst arms point to fail at its n-th call in phase, sends a burst,
// and checks that the fault fired, failed some requests cleanly, and left
// the engine serving.
func faultBurst(t *testing.T, point, phase string, n int, err error) {
	t.Helper()
	defer failpoint.Reset()
	v := failpointEnv(t, serve.Options{})
	hook, fired := failpoint.FailNth(n, phase, err)
	failpoint.Enable(point, hook)
	os := burst(t, v.ts.URL, 8, 24)
	if !fired() {
		t.Fatalf("%s never failed (phase %q)", point, phase)
	}
	checkOutcomes(t, os, true)
	checkHealthy(t, v)
}

func TestFailpointAllocDuringStep(t *testing.T) {
	faultBurst(t, failpoint.Alloc, failpoint.PhaseStep, 4, errInjectedOOM)
}

// A pre-plan whose planning fails is dropped and the step plans itself. On
// the CPU device a pre-plan writes into the slot's static inputs and
// allocates nothing, so the fault is injected where it plans (failpoint.Plan)
// rather than in the allocator.
func TestFailpointPlanDuringPrePlan(t *testing.T) {
	defer failpoint.Reset()
	v := failpointEnv(t, serve.Options{})
	hook, fired := failpoint.FailNth(2, failpoint.PhasePrePlan, errInjectedOOM)
	failpoint.Enable(failpoint.Plan, hook)
	// A lone request's decode steps are pre-planned (nothing arrives).
	lone := request(t, v.ts.URL, "Once upon a time", 64, true)
	os := append(burst(t, v.ts.URL, 8, 24), lone)
	if v.e.Stats().PrePlans == 0 {
		t.Fatal("no step was pre-planned")
	}
	if !fired() {
		t.Fatal("the fault never fired during a pre-plan")
	}
	checkOutcomes(t, os, false)
	checkHealthy(t, v)
}

func TestFailpointReplayError(t *testing.T) {
	faultBurst(t, failpoint.Replay, "", 3, errors.New("cuda: kernel launch: an illegal memory access was encountered"))
}

// A client that stops reading its stream is cut at the write bound; its
// request is cancelled and its pages freed, and the others go on.
func TestFailpointStreamStall(t *testing.T) {
	defer failpoint.Reset()
	const bound = 100 * time.Millisecond
	v := failpointEnv(t, serve.Options{WriteTimeout: bound})
	var once sync.Once
	failpoint.Enable(failpoint.StreamEvent, func() error {
		once.Do(func() { time.Sleep(3 * bound) }) // the first event's client stalls
		return nil
	})
	resp, err := http.Post(v.ts.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"Once upon a time","max_tokens":64,"temperature":0,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "[DONE]") {
		t.Errorf("a stalled stream was not cut: %s", b)
	}
	checkOutcomes(t, burst(t, v.ts.URL, 8, 24), false)
	checkHealthy(t, v)
}

// With graphs required, a bucket background capture drops (an allocation
// fails during its capture) stops the engine loudly: its Err wraps
// graph.ErrGraphsRequired and names the bucket, Done closes (reprise serve
// then exits non-zero with the reason), and /health is 503 not_ready (issue
// 19, item 3). It used to serve on, eager.
func TestFailpointRequiredGraphDroppedInTheBackground(t *testing.T) {
	defer failpoint.Reset()
	hook, fired := failpoint.FailNth(3, failpoint.PhaseCapture, errInjectedOOM)
	failpoint.Enable(failpoint.Alloc, hook)
	v, err := newEnv(engine.Options{Graphs: true, BackgroundCapture: true, NoPlan: true, PlanCache: "off",
		Runner: graph.Options{RequireGraphs: true}}, serve.Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.close)
	select {
	case <-v.e.Done():
	case <-time.After(time.Minute):
		t.Fatal("the engine still runs a minute after start")
	}
	failpoint.Reset()
	if !fired() {
		t.Fatal("no allocation failed during capture")
	}
	err = v.e.Err()
	if !errors.Is(err, graph.ErrGraphsRequired) || !strings.Contains(err.Error(), "capture dropped") {
		t.Fatalf("Err: %v, want ErrGraphsRequired naming the dropped bucket", err)
	}
	code, _, body := get(t, v.ts.URL, "/health")
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "not_ready") {
		t.Fatalf("health after the engine stopped: %d %s", code, body)
	}
}
