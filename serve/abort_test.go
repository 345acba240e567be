package serve_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/serve"
)

// A forced shutdown (Abort) ends a stream in flight with one error event
// and [DONE], counts it as cut, frees its pages, and refuses what comes
// after. A stream that finishes before the abort proves nothing and is
// tried again, so the test does not depend on the device's speed.
func TestAbortEndsStreams(t *testing.T) {
	v := sharedEnv(t)
	for attempt := 0; ; attempt++ {
		if attempt == 10 {
			t.Fatal("in 10 attempts every stream finished before the abort")
		}
		waitIdle(t, v)
		srv, err := serve.New(v.e, v.m.Info(), v.tok, serve.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(srv)
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"Once upon a time","max_tokens":500,"temperature":0,"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		var events []string
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				if len(events) == 0 {
					srv.Abort()
				}
				events = append(events, line)
			}
		}
		resp.Body.Close()
		code, _, _ := post(t, ts.URL, "/v1/completions", `{"prompt":"x","max_tokens":2}`)
		ts.Close()
		if code != http.StatusServiceUnavailable {
			t.Errorf("after Abort a new request got %d", code)
		}
		n := len(events)
		if n < 2 || events[n-1] != "[DONE]" {
			t.Fatalf("the stream did not end with [DONE]: %q", events)
		}
		if srv.Cut() == 0 {
			if !strings.Contains(events[n-2], `"finish_reason":"length"`) {
				t.Fatalf("not cut, yet no finish: %q", events[n-2])
			}
			continue
		}
		if srv.Cut() != 1 || !strings.Contains(events[n-2], `"code":"shutting_down"`) {
			t.Fatalf("cut %d, last event %q", srv.Cut(), events[n-2])
		}
		for _, ev := range events[:n-2] {
			if strings.Contains(ev, "finish_reason\":\"") || strings.Contains(ev, `"error"`) {
				t.Fatalf("a second final event %q", ev)
			}
		}
		waitIdle(t, v)
		return
	}
}
