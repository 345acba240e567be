package serve

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
)

// latencyBuckets are the upper bounds (seconds) of the server's latency
// histograms: time to first token and request duration.
var latencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

type histogram struct {
	counts []int64 // per bucket, the last one past every bound
	sum    float64
	count  int64
}

func (h *histogram) observe(v float64) {
	if h.counts == nil {
		h.counts = make([]int64, len(latencyBuckets)+1)
	}
	h.counts[sort.SearchFloat64s(latencyBuckets, v)]++
	h.sum += v
	h.count++
}

// metrics are the server's own counters; the engine's and the graph
// runner's are read when /metrics is scraped.
type metrics struct {
	promptTokens     atomic.Int64
	completionTokens atomic.Int64
	inFlight         atomic.Int64

	mu       sync.Mutex
	requests map[[2]string]int64 // (endpoint, status code)
	finished map[[2]string]int64 // (endpoint, finish reason)
	ttft     map[string]*histogram
	duration map[string]*histogram
}

func newMetrics() *metrics {
	return &metrics{requests: map[[2]string]int64{}, finished: map[[2]string]int64{},
		ttft: map[string]*histogram{}, duration: map[string]*histogram{}}
}

func (m *metrics) request(endpoint string, code int) {
	m.mu.Lock()
	m.requests[[2]string{endpoint, strconv.Itoa(code)}]++
	m.mu.Unlock()
}

func (m *metrics) finish(endpoint, reason string, d time.Duration) {
	m.mu.Lock()
	m.finished[[2]string{endpoint, reason}]++
	h := m.duration[endpoint]
	if h == nil {
		h = &histogram{}
		m.duration[endpoint] = h
	}
	h.observe(d.Seconds())
	m.mu.Unlock()
}

func (m *metrics) firstToken(endpoint string, d time.Duration) {
	m.mu.Lock()
	h := m.ttft[endpoint]
	if h == nil {
		h = &histogram{}
		m.ttft[endpoint] = h
	}
	h.observe(d.Seconds())
	m.mu.Unlock()
}

// promWriter writes the Prometheus text exposition format (version 0.0.4).
type promWriter struct {
	w io.Writer
}

func (p promWriter) family(name, typ, help string) {
	fmt.Fprintf(p.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// sample writes one sample; labels are name, value pairs.
func (p promWriter) sample(name string, v float64, labels ...string) {
	var b strings.Builder
	b.WriteString(name)
	if len(labels) > 0 {
		b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(labels[i])
			b.WriteString(`="`)
			b.WriteString(escapeLabel(labels[i+1]))
			b.WriteByte('"')
		}
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(formatFloat(v))
	b.WriteByte('\n')
	io.WriteString(p.w, b.String())
}

// histogram writes a histogram's buckets (counts per bucket, the last past
// every bound), sum and count.
func (p promWriter) histogram(name string, bounds []float64, counts []int64, sum float64, count int64, labels ...string) {
	cum := int64(0)
	for i, b := range bounds {
		if i < len(counts) {
			cum += counts[i]
		}
		p.sample(name+"_bucket", float64(cum), append(slices.Clone(labels), "le", formatFloat(b))...)
	}
	p.sample(name+"_bucket", float64(count), append(slices.Clone(labels), "le", "+Inf")...)
	p.sample(name+"_sum", sum, labels...)
	p.sample(name+"_count", float64(count), labels...)
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func formatFloat(v float64) string {
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func sortedKeys[V any](m map[[2]string]V) [][2]string {
	keys := make([][2]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	return keys
}

// handleMetrics answers GET /metrics.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	s.writeMetrics(&b)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	io.WriteString(w, b.String())
}

func (s *Server) writeMetrics(w io.Writer) {
	p := promWriter{w}
	m := s.metrics
	m.mu.Lock()
	requests := maps.Clone(m.requests)
	finished := maps.Clone(m.finished)
	ttft, duration := map[string]histogram{}, map[string]histogram{}
	for k, h := range m.ttft {
		ttft[k] = histogram{counts: slices.Clone(h.counts), sum: h.sum, count: h.count}
	}
	for k, h := range m.duration {
		duration[k] = histogram{counts: slices.Clone(h.counts), sum: h.sum, count: h.count}
	}
	m.mu.Unlock()

	p.family("reprise_requests_total", "counter", "HTTP requests answered, by endpoint and status code.")
	for _, k := range sortedKeys(requests) {
		p.sample("reprise_requests_total", float64(requests[k]), "endpoint", k[0], "code", k[1])
	}
	p.family("reprise_requests_finished_total", "counter", "Generations that ended, by endpoint and reason (stop, length, cancelled, error).")
	for _, k := range sortedKeys(finished) {
		p.sample("reprise_requests_finished_total", float64(finished[k]), "endpoint", k[0], "reason", k[1])
	}
	p.family("reprise_requests_in_flight", "gauge", "Generation requests being answered.")
	p.sample("reprise_requests_in_flight", float64(m.inFlight.Load()))
	p.family("reprise_prompt_tokens_total", "counter", "Prompt tokens of the generations submitted to the engine.")
	p.sample("reprise_prompt_tokens_total", float64(m.promptTokens.Load()))
	p.family("reprise_completion_tokens_total", "counter", "Tokens generated for answered requests (usage completion_tokens).")
	p.sample("reprise_completion_tokens_total", float64(m.completionTokens.Load()))
	p.family("reprise_time_to_first_token_seconds", "histogram", "Time from a request's arrival to its first generated token.")
	for _, k := range sortedStrings(ttft) {
		h := ttft[k]
		p.histogram("reprise_time_to_first_token_seconds", latencyBuckets, h.counts, h.sum, h.count, "endpoint", k)
	}
	p.family("reprise_request_duration_seconds", "histogram", "Time from a request's arrival to its end, for generations.")
	for _, k := range sortedStrings(duration) {
		h := duration[k]
		p.histogram("reprise_request_duration_seconds", latencyBuckets, h.counts, h.sum, h.count, "endpoint", k)
	}

	st := s.eng.Stats()
	p.family("reprise_queue_depth", "gauge", "Requests waiting for the engine to admit them (KV backpressure).")
	p.sample("reprise_queue_depth", float64(st.Waiting))
	p.family("reprise_running_requests", "gauge", "Requests in the engine's running batch.")
	p.sample("reprise_running_requests", float64(st.Running))
	p.family("reprise_generated_tokens_total", "counter", "Tokens the engine generated, cancelled requests included.")
	p.sample("reprise_generated_tokens_total", float64(st.Tokens))
	p.family("reprise_engine_requests_finished_total", "counter", "Requests the engine finished, whatever the reason.")
	p.sample("reprise_engine_requests_finished_total", float64(st.Finished))
	p.family("reprise_kv_pages_used", "gauge", "KV cache pages held by requests.")
	p.sample("reprise_kv_pages_used", float64(st.KVPagesUsed))
	p.family("reprise_kv_pages_free", "gauge", "KV cache pages free.")
	p.sample("reprise_kv_pages_free", float64(st.KVPagesFree))
	p.family("reprise_pre_plans_total", "counter", "Steps planned while the previous one ran, by outcome (hit: used, stale: thrown away).")
	p.sample("reprise_pre_plans_total", float64(st.PrePlanHits), "outcome", "hit")
	p.sample("reprise_pre_plans_total", float64(st.PrePlanStale), "outcome", "stale")
	p.sample("reprise_pre_plans_total", float64(st.PrePlans-st.PrePlanHits-st.PrePlanStale), "outcome", "other")

	bounds := make([]float64, len(engine.LatencyBuckets))
	for i, d := range engine.LatencyBuckets {
		bounds[i] = d.Seconds()
	}
	p.family("reprise_step_duration_seconds", "histogram", "Engine step latency by walk (prefill, decode) and mode (replay, eager).")
	for _, step := range st.Steps {
		mode := "eager"
		if step.Replay {
			mode = "replay"
		}
		p.histogram("reprise_step_duration_seconds", bounds, step.Buckets, step.Total.Seconds(), step.Steps, "walk", step.Walk, "mode", mode)
	}
	p.family("reprise_step_rows_total", "counter", "Request rows the engine's steps carried, by walk and mode.")
	for _, step := range st.Steps {
		mode := "eager"
		if step.Replay {
			mode = "replay"
		}
		p.sample("reprise_step_rows_total", float64(step.Rows), "walk", step.Walk, "mode", mode)
	}

	p.family("reprise_graphs_enabled", "gauge", "1 when the engine replays captured graphs, 0 when every step runs eager.")
	runners := s.eng.Runners()
	if len(runners) == 0 {
		p.sample("reprise_graphs_enabled", 0)
		return
	}
	p.sample("reprise_graphs_enabled", 1)
	p.family("reprise_graph_live_buckets", "gauge", "Buckets captured and live, over every runner.")
	p.sample("reprise_graph_live_buckets", float64(s.eng.LiveBuckets()))
	tel := map[string]graph.Telemetry{}
	names := sortedStrings(runners)
	for _, name := range names {
		tel[name] = runners[name].Telemetry()
	}
	p.family("reprise_graph_replays_total", "counter", "Replays of a captured bucket, by runner (graphs: whole steps; a region's label) and bucket.")
	for _, name := range names {
		for _, b := range tel[name].Buckets {
			p.sample("reprise_graph_replays_total", float64(b.Replays), "runner", name, "bucket", b.Bucket)
		}
	}
	p.family("reprise_graph_padding_rows_total", "counter", "Padding rows replays of a bucket carried.")
	for _, name := range names {
		for _, b := range tel[name].Buckets {
			p.sample("reprise_graph_padding_rows_total", float64(b.PaddingRows), "runner", name, "bucket", b.Bucket)
		}
	}
	p.family("reprise_graph_real_rows_total", "counter", "Request rows replays of a bucket carried.")
	for _, name := range names {
		for _, b := range tel[name].Buckets {
			p.sample("reprise_graph_real_rows_total", float64(b.RealRows), "runner", name, "bucket", b.Bucket)
		}
	}
	p.family("reprise_graph_eager_fallbacks_total", "counter", "Steps of a captured walk that ran eager, by runner, walk and reason.")
	for _, name := range names {
		for _, f := range tel[name].Fallbacks {
			p.sample("reprise_graph_eager_fallbacks_total", float64(f.Steps), "runner", name, "walk", f.Walk, "reason", f.Reason)
		}
	}
	p.family("reprise_graph_dropped_buckets", "gauge", "Buckets whose capture was dropped, by runner.")
	for _, name := range names {
		p.sample("reprise_graph_dropped_buckets", float64(len(tel[name].Dropped)), "runner", name)
	}
}

func sortedStrings[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
