package serve_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
	"github.com/reprise-ml/reprise/serve"
)

// With graphs required and captured in the background, /health is 503
// not_ready (saying why) until every bucket is live, then 200 (issue 19,
// item 3): a load balancer does not send requests to a server that would
// serve them at eager latency.
func TestHealthNotReadyUntilRequiredGraphsAreLive(t *testing.T) {
	v, err := newEnv(engine.Options{Graphs: true, BackgroundCapture: true, PlanCache: "off",
		Runner: graph.Options{RequireGraphs: true}}, serve.Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.close)
	code, _, body := get(t, v.ts.URL, "/health")
	var h map[string]any
	if json.Unmarshal(body, &h); code != http.StatusServiceUnavailable || h["status"] != "not_ready" || h["reason"] == "" {
		t.Fatalf("health while required graphs are captured: %d %s", code, body)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		code, _, body = get(t, v.ts.URL, "/health")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health a minute after start: %d %s", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := v.e.LiveBuckets(); n == 0 || v.e.Stats().BackgroundDropped != 0 {
		t.Fatalf("ready with %d buckets live, %d dropped", n, v.e.Stats().BackgroundDropped)
	}
}
