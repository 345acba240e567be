package serve

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/reprise-ml/reprise/engine"
)

// Histogram bounds (seconds). vLLM's sets start at 1 ms or 10 ms; a step of
// a small model on a CPU takes well under that, so these start lower.
var (
	// latencyBuckets: time to first token, queue, prefill, end to end.
	latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// tokenBuckets: time between tokens and per output token.
	tokenBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5}
	// countBuckets: a request's prompt and generated tokens.
	countBuckets = prometheus.ExponentialBuckets(1, 2, 14)
)

// metrics are the server's Prometheus metrics: vLLM's set under reprise_
// names, each with a model_name label, with Go's runtime and process
// collectors beside them. Per-request ones are observed as requests go;
// the engine's and the graph runners' are read from their counters at
// scrape time (engineCollector).
type metrics struct {
	reg *prometheus.Registry

	requests         *prometheus.CounterVec // endpoint, code
	finished         *prometheus.CounterVec // endpoint, reason
	inFlight         prometheus.Gauge
	promptTokens     prometheus.Counter
	completionTokens prometheus.Counter
	ttft             *prometheus.HistogramVec // endpoint
	e2e              *prometheus.HistogramVec // endpoint
	itl              prometheus.Histogram
	tpot             prometheus.Histogram
	queue            prometheus.Histogram
	prefill          prometheus.Histogram
	decode           prometheus.Histogram
	reqPrompt        prometheus.Histogram
	reqGenerated     prometheus.Histogram
}

func newMetrics(e *engine.Engine, model string) *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r := prometheus.WrapRegistererWith(prometheus.Labels{"model_name": model}, reg)
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		r.MustRegister(c)
		return c
	}
	hist := func(name, help string, bounds []float64, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: bounds}, labels)
		r.MustRegister(h)
		return h
	}
	m := &metrics{reg: reg,
		requests:         counter("reprise_requests_total", "HTTP requests answered, by endpoint and status code.", "endpoint", "code"),
		finished:         counter("reprise_requests_finished_total", "Generations that ended, by endpoint and reason (stop, length, cancelled, error).", "endpoint", "reason"),
		inFlight:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "reprise_requests_in_flight", Help: "Generation requests being answered."}),
		promptTokens:     counter("reprise_prompt_tokens_total", "Prompt tokens of the generations submitted to the engine.").WithLabelValues(),
		completionTokens: counter("reprise_completion_tokens_total", "Tokens generated for answered requests (usage completion_tokens).").WithLabelValues(),
		ttft:             hist("reprise_time_to_first_token_seconds", "Time from a request's arrival to its first generated token.", latencyBuckets, "endpoint"),
		e2e:              hist("reprise_e2e_request_latency_seconds", "Time from a request's arrival to its end, for generations.", latencyBuckets, "endpoint"),
		itl:              hist("reprise_inter_token_latency_seconds", "Time between two successive tokens of a request.", tokenBuckets).WithLabelValues().(prometheus.Histogram),
		tpot: hist("reprise_request_time_per_output_token_seconds",
			"Per finished request of two or more tokens: time from its first token to its last over the tokens after the first.", tokenBuckets).WithLabelValues().(prometheus.Histogram),
		queue: hist("reprise_request_queue_time_seconds", "Per finished request: time from submission to the engine until the scheduler admitted it into a prefill.",
			latencyBuckets).WithLabelValues().(prometheus.Histogram),
		prefill: hist("reprise_request_prefill_time_seconds", "Per finished request: time from admission to its first token.",
			latencyBuckets).WithLabelValues().(prometheus.Histogram),
		decode: hist("reprise_request_decode_time_seconds", "Per finished request: time from its first token to its last.",
			latencyBuckets).WithLabelValues().(prometheus.Histogram),
		reqPrompt: hist("reprise_request_prompt_tokens", "Per finished request: prompt tokens.", countBuckets).WithLabelValues().(prometheus.Histogram),
		reqGenerated: hist("reprise_request_generation_tokens", "Per finished request: generated tokens.",
			countBuckets).WithLabelValues().(prometheus.Histogram),
	}
	r.MustRegister(m.inFlight, &engineCollector{e: e})
	return m
}

func (m *metrics) request(endpoint string, code int) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
}

func (m *metrics) firstToken(endpoint string, d time.Duration) {
	m.ttft.WithLabelValues(endpoint).Observe(d.Seconds())
}

// finish counts a generation that ended and its end-to-end latency.
func (m *metrics) finish(endpoint, reason string, d time.Duration) {
	m.finished.WithLabelValues(endpoint, reason).Inc()
	m.e2e.WithLabelValues(endpoint).Observe(d.Seconds())
}

// phases observes a finished request's queue, prefill and decode times,
// its time per output token and its token counts. admitted is zero when
// the engine does not say.
func (m *metrics) phases(submitted, admitted, first, last time.Time, prompt, tokens int) {
	if !admitted.IsZero() {
		m.queue.Observe(admitted.Sub(submitted).Seconds())
		if !first.IsZero() {
			m.prefill.Observe(first.Sub(admitted).Seconds())
		}
	}
	if !first.IsZero() {
		m.decode.Observe(last.Sub(first).Seconds())
		if tokens > 1 {
			m.tpot.Observe(last.Sub(first).Seconds() / float64(tokens-1))
		}
	}
	m.reqPrompt.Observe(float64(prompt))
	m.reqGenerated.Observe(float64(tokens))
}

// handleMetrics answers GET /metrics in the format the scraper asks for
// (Prometheus text, OpenMetrics or protobuf).
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	s.metricsHandler.ServeHTTP(w, r)
}

// engineCollector reads the engine's counters and its graph runners'
// telemetry at scrape time.
type engineCollector struct {
	e *engine.Engine
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descWaiting   = desc("reprise_num_requests_waiting", "Requests waiting for the engine to admit them (KV backpressure).")
	descRunning   = desc("reprise_num_requests_running", "Requests in the engine's running batch.")
	descGenerated = desc("reprise_generation_tokens_total", "Tokens the engine generated, cancelled requests included.")
	descFinished  = desc("reprise_engine_requests_finished_total", "Requests the engine finished, whatever the reason.")
	descKVUsed    = desc("reprise_kv_pages_used", "KV cache pages held by requests.")
	descKVFree    = desc("reprise_kv_pages_free", "KV cache pages free.")
	descKVUsage   = desc("reprise_kv_cache_usage_perc", "Fraction of the KV cache's pages held by requests (0 to 1).")
	descPrePlans  = desc("reprise_pre_plans_total", "Steps planned while the previous one ran, by outcome (hit: used, stale: thrown away).", "outcome")
	descStep      = desc("reprise_step_duration_seconds", "Engine step latency by walk (prefill, decode) and mode (replay, eager).", "walk", "mode")
	descStepRows  = desc("reprise_step_rows_total", "Request rows the engine's steps carried, by walk and mode.", "walk", "mode")
	descGraphs    = desc("reprise_graphs_enabled", "1 when the engine replays captured graphs, 0 when every step runs eager.")
	descLive      = desc("reprise_graph_live_buckets", "Buckets captured and live, over every runner.")
	descCapture   = desc("reprise_graph_capture_seconds_total", "Time spent sizing, planning and capturing graphs, before serving and in the background.")
	descReplays   = desc("reprise_graph_replays_total", "Replays of a captured bucket, by runner (graphs: whole steps; a region's label) and bucket.", "runner", "bucket")
	descPadding   = desc("reprise_graph_padding_rows_total", "Padding rows replays of a bucket carried.", "runner", "bucket")
	descReal      = desc("reprise_graph_real_rows_total", "Request rows replays of a bucket carried.", "runner", "bucket")
	descFallbacks = desc("reprise_graph_eager_fallbacks_total", "Steps of a captured walk that ran eager, by runner, walk and reason.", "runner", "walk", "reason")
	descDropped   = desc("reprise_graph_dropped_buckets", "Buckets whose capture was dropped, by runner.", "runner")
)

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWaiting, descRunning, descGenerated, descFinished, descKVUsed, descKVFree, descKVUsage,
		descPrePlans, descStep, descStepRows, descGraphs, descLive, descCapture, descReplays, descPadding, descReal, descFallbacks, descDropped} {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	count := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	st := c.e.Stats()
	gauge(descWaiting, float64(st.Waiting))
	gauge(descRunning, float64(st.Running))
	count(descGenerated, float64(st.Tokens))
	count(descFinished, float64(st.Finished))
	gauge(descKVUsed, float64(st.KVPagesUsed))
	gauge(descKVFree, float64(st.KVPagesFree))
	usage := 0.0
	if total := st.KVPagesUsed + st.KVPagesFree; total > 0 {
		usage = float64(st.KVPagesUsed) / float64(total)
	}
	gauge(descKVUsage, usage)
	count(descPrePlans, float64(st.PrePlanHits), "hit")
	count(descPrePlans, float64(st.PrePlanStale), "stale")
	count(descPrePlans, float64(st.PrePlans-st.PrePlanHits-st.PrePlanStale), "other")
	for _, step := range st.Steps {
		mode := "eager"
		if step.Replay {
			mode = "replay"
		}
		buckets := make(map[float64]uint64, len(engine.LatencyBuckets))
		var cum uint64
		for i, b := range engine.LatencyBuckets {
			if i < len(step.Buckets) {
				cum += uint64(step.Buckets[i])
			}
			buckets[b.Seconds()] = cum
		}
		ch <- prometheus.MustNewConstHistogram(descStep, uint64(step.Steps), step.Total.Seconds(), buckets, step.Walk, mode)
		count(descStepRows, float64(step.Rows), step.Walk, mode)
	}

	gs := c.e.GraphStats()
	if !gs.Enabled {
		gauge(descGraphs, 0)
		return
	}
	gauge(descGraphs, 1)
	gauge(descLive, float64(gs.LiveBuckets))
	count(descCapture, gs.CaptureTime.Seconds())
	for _, r := range gs.Runners {
		for _, b := range r.Buckets {
			count(descReplays, float64(b.Replays), r.Name, b.Bucket)
			count(descPadding, float64(b.PaddingRows), r.Name, b.Bucket)
			count(descReal, float64(b.RealRows), r.Name, b.Bucket)
		}
		for _, f := range r.Fallbacks {
			count(descFallbacks, float64(f.Steps), r.Name, f.Walk, f.Reason)
		}
		gauge(descDropped, float64(len(r.Dropped)), r.Name)
	}
}

// newMetricsHandler serves the registry with content negotiation:
// OpenMetrics when the scraper accepts it.
func newMetricsHandler(m *metrics, log interface{ Println(...any) }) http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true, ErrorLog: log})
}
