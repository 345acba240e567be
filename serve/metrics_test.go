package serve_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// scrape reads /metrics in the format accept asks for (empty: the
// default) with Prometheus's own decoder, by the format the server says
// it answered in.
func scrape(t testing.TB, url, accept string) (map[string]*dto.MetricFamily, http.Header, []byte) {
	t.Helper()
	var hdr []string
	if accept != "" {
		hdr = []string{"Accept", accept}
	}
	code, h, body := get(t, url, "/metrics", hdr...)
	if code != http.StatusOK {
		t.Fatalf("/metrics: status %d: %s", code, body)
	}
	dec := expfmt.NewDecoder(bytes.NewReader(body), expfmt.ResponseFormat(h))
	fams := map[string]*dto.MetricFamily{}
	for {
		var mf dto.MetricFamily
		err := dec.Decode(&mf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("/metrics (%s) does not parse: %v\n%s", h.Get("Content-Type"), err, body)
		}
		fams[mf.GetName()] = &mf
	}
	return fams, h, body
}

// parseOpenMetrics decodes the reprise_ families of an OpenMetrics body.
// Go's runtime collector exports go_memstats_alloc_bytes (a gauge) beside
// go_memstats_alloc_bytes_total (a counter), which a strict OpenMetrics
// parser reads as one family twice (client_golang's known collision; the
// Prometheus server takes it): those families are left out here.
func parseOpenMetrics(t testing.TB, body []byte, hdr http.Header) map[string]*dto.MetricFamily {
	t.Helper()
	var keep bytes.Buffer
	in := false
	for _, line := range bytes.SplitAfter(body, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok {
			in = bytes.HasPrefix(rest, []byte("reprise_"))
		} else if bytes.Equal(line, []byte("# EOF\n")) {
			in = true
		}
		if in {
			keep.Write(line)
		}
	}
	dec := expfmt.NewDecoder(&keep, expfmt.ResponseFormat(hdr))
	fams := map[string]*dto.MetricFamily{}
	for {
		var mf dto.MetricFamily
		err := dec.Decode(&mf)
		if errors.Is(err, io.EOF) {
			return fams
		}
		if err != nil {
			t.Fatalf("OpenMetrics does not parse: %v\n%s", err, keep.Bytes())
		}
		fams[mf.GetName()] = &mf
	}
}

// labelsHave reports whether a metric carries every label of want
// (name=value pairs).
func labelsHave(m *dto.Metric, want ...string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == want[i] && l.GetValue() == want[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// value is a counter's or gauge's value, or a histogram's count.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// find sums the family's metrics that carry the labels (and says whether
// there was one).
func find(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf := fams[name]
	if mf == nil {
		return 0, false
	}
	sum, ok := 0.0, false
	for _, m := range mf.GetMetric() {
		if labelsHave(m, labels...) {
			sum += value(m)
			ok = true
		}
	}
	return sum, ok
}

// metricValue is find on a fresh scrape, 0 when absent.
func metricValue(t testing.TB, url, name string, labels ...string) float64 {
	t.Helper()
	fams, _, _ := scrape(t, url, "")
	v, _ := find(fams, name, labels...)
	return v
}

func TestMetrics(t *testing.T) {
	v := sharedEnv(t)
	post(t, v.ts.URL, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":8,"temperature":0}`)
	post(t, v.ts.URL, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":8,"temperature":0,"stream":true}`)
	post(t, v.ts.URL, "/v1/completions", `{"prompt":"x","bogus":3}`)
	get(t, v.ts.URL, "/nowhere")
	fams, hdr, body := scrape(t, v.ts.URL, "")
	if !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Errorf("content type %q", hdr.Get("Content-Type"))
	}
	const model = "stories260K"
	for _, tc := range []struct {
		name   string
		labels []string
		min    float64
	}{
		{"reprise_requests_total", []string{"endpoint", "/v1/completions", "code", "200"}, 2},
		{"reprise_requests_total", []string{"endpoint", "/v1/completions", "code", "400"}, 1},
		{"reprise_requests_total", []string{"endpoint", "other", "code", "404"}, 1},
		{"reprise_requests_finished_total", []string{"endpoint", "/v1/completions", "reason", "length"}, 2},
		{"reprise_prompt_tokens_total", nil, 1},
		{"reprise_completion_tokens_total", nil, 16},
		{"reprise_generation_tokens_total", nil, 16},
		{"reprise_time_to_first_token_seconds", []string{"endpoint", "/v1/completions"}, 2},
		{"reprise_e2e_request_latency_seconds", []string{"endpoint", "/v1/completions"}, 2},
		{"reprise_inter_token_latency_seconds", nil, 14},
		{"reprise_request_time_per_output_token_seconds", nil, 2},
		{"reprise_request_queue_time_seconds", nil, 2},
		{"reprise_request_prefill_time_seconds", nil, 2},
		{"reprise_request_decode_time_seconds", nil, 2},
		{"reprise_request_prompt_tokens", nil, 2},
		{"reprise_request_generation_tokens", nil, 2},
		{"reprise_num_requests_waiting", nil, 0},
		{"reprise_num_requests_running", nil, 0},
		{"reprise_requests_in_flight", nil, 0},
		{"reprise_kv_pages_used", nil, 0},
		{"reprise_kv_pages_free", nil, 1},
		{"reprise_kv_cache_usage_perc", nil, 0},
		{"reprise_step_duration_seconds", []string{"walk", "decode", "mode", "replay"}, 1},
		{"reprise_step_duration_seconds", []string{"walk", "prefill"}, 1},
		{"reprise_step_rows_total", []string{"walk", "decode", "mode", "replay"}, 1},
		{"reprise_graphs_enabled", nil, 1},
		{"reprise_graph_replays_total", []string{"runner", "graphs"}, 1},
		{"reprise_graph_replays_total", []string{"runner", "blocks"}, 1},
		{"reprise_graph_padding_rows_total", []string{"runner", "graphs"}, 0},
		{"reprise_graph_real_rows_total", []string{"runner", "graphs"}, 1},
		{"reprise_graph_live_buckets", nil, 2},
		{"reprise_graph_capture_seconds_total", nil, 1e-9},
		{"reprise_graph_dropped_buckets", []string{"runner", "graphs"}, 0},
	} {
		got, ok := find(fams, tc.name, append([]string{"model_name", model}, tc.labels...)...)
		if !ok || got < tc.min {
			t.Errorf("%s%v = %v (present %v), want at least %v", tc.name, tc.labels, got, ok, tc.min)
		}
	}
	if u, _ := find(fams, "reprise_kv_cache_usage_perc"); u < 0 || u > 1 {
		t.Errorf("KV cache usage %v is not a ratio", u)
	}
	for name, typ := range map[string]dto.MetricType{"reprise_requests_total": dto.MetricType_COUNTER,
		"reprise_num_requests_waiting": dto.MetricType_GAUGE, "reprise_step_duration_seconds": dto.MetricType_HISTOGRAM,
		"reprise_time_to_first_token_seconds": dto.MetricType_HISTOGRAM, "reprise_inter_token_latency_seconds": dto.MetricType_HISTOGRAM,
		"go_goroutines": dto.MetricType_GAUGE, "process_cpu_seconds_total": dto.MetricType_COUNTER} {
		if mf := fams[name]; mf == nil || mf.GetType() != typ {
			t.Errorf("%s: %v, want a %v", name, mf.GetType(), typ)
		}
	}
	// Every reprise_ metric names the model; buckets are cumulative and end
	// at the count.
	for name, mf := range fams {
		if !strings.HasPrefix(name, "reprise_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsHave(m, "model_name", model) {
				t.Errorf("%s%v has no model_name label", name, m.GetLabel())
			}
			h := m.GetHistogram()
			if h == nil {
				continue
			}
			prev := uint64(0)
			for _, b := range h.GetBucket() {
				if b.GetCumulativeCount() < prev || b.GetCumulativeCount() > h.GetSampleCount() {
					t.Errorf("%s: bucket le=%v holds %d after %d of %d", name, b.GetUpperBound(), b.GetCumulativeCount(), prev, h.GetSampleCount())
				}
				prev = b.GetCumulativeCount()
			}
		}
	}
	if !bytes.Contains(body, []byte("# HELP reprise_inter_token_latency_seconds ")) {
		t.Error("no HELP line for the inter-token latency")
	}

	// OpenMetrics when asked for, and protobuf: the same families.
	const accept = "application/openmetrics-text; version=1.0.0; charset=utf-8"
	code, hdr, body := get(t, v.ts.URL, "/metrics", "Accept", accept)
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "application/openmetrics-text") || !bytes.HasSuffix(body, []byte("# EOF\n")) {
		t.Errorf("OpenMetrics: status %d, content type %q, ends %q", code, hdr.Get("Content-Type"), body[max(0, len(body)-20):])
	}
	om := parseOpenMetrics(t, body, hdr)
	pb, hdr, _ := scrape(t, v.ts.URL, "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited")
	if !strings.Contains(hdr.Get("Content-Type"), "protobuf") {
		t.Errorf("protobuf: content type %q", hdr.Get("Content-Type"))
	}
	for _, name := range []string{"reprise_requests_total", "reprise_graph_replays_total", "reprise_time_to_first_token_seconds"} {
		if _, ok := om[name]; !ok {
			t.Errorf("OpenMetrics lacks %s", name)
		}
		if _, ok := pb[name]; !ok {
			t.Errorf("protobuf lacks %s", name)
		}
	}
}
