package main

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

// A forced shutdown sends the streams it cuts an error event and [DONE],
// and the exit status says requests were cut. A stream that finishes
// before the deadline proves nothing and is tried again.
func TestForcedShutdownExitStatus(t *testing.T) {
	t.Setenv("REPRISE_PLAN_CACHE", "off")
	for attempt := 0; attempt < 5; attempt++ {
		url, stderr, stop := startServe(t, "--shutdown-timeout", "1ms", "--graphs", "off", "--device-memory", "256MiB")
		resp, err := http.Post(url+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"Once upon a time","max_tokens":500,"temperature":0,"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		var events []string
		codes := make(chan int, 1)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				if len(events) == 0 {
					go func() { codes <- stop() }()
				}
				events = append(events, line)
			}
		}
		resp.Body.Close()
		code := <-codes
		n := len(events)
		if n < 2 || events[n-1] != "[DONE]" {
			t.Fatalf("the stream did not end with [DONE]: %q", events)
		}
		if code == 0 {
			continue // it finished in time
		}
		if code != 1 || !strings.Contains(stderr.String(), "shutdown cut 1 request(s) in flight") ||
			!strings.Contains(events[n-2], `"code":"shutting_down"`) {
			t.Fatalf("exit %d, last event %q, stderr:\n%s", code, events[n-2], stderr.String())
		}
		return
	}
	t.Fatal("in 5 attempts every stream finished before the shutdown deadline")
}
