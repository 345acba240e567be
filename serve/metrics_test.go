package serve_test

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sample is one parsed metrics line.
type sample struct {
	name   string
	labels string // as written, without braces
	value  float64
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*)\})? (\S+)$`)

// parseMetrics checks the Prometheus text format: every sample's family
// has HELP and TYPE lines before it, and every line parses.
func parseMetrics(t testing.TB, text string) ([]sample, map[string]string) {
	t.Helper()
	types := map[string]string{}
	helped := map[string]bool{}
	var out []sample
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, _, _ := strings.Cut(rest, " ")
			helped[name] = true
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			if !helped[name] {
				t.Errorf("TYPE before HELP for %s", name)
			}
			types[name] = typ
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("bad metrics line %q", line)
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Errorf("bad value in %q", line)
		}
		family := m[1]
		if types[family] == "" {
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if f, ok := strings.CutSuffix(family, suf); ok && types[f] == "histogram" {
					family = f
				}
			}
		}
		if types[family] == "" {
			t.Errorf("sample %q before its TYPE", line)
		}
		out = append(out, sample{m[1], m[2], v})
	}
	return out, types
}

// metricValue is the value of the sample whose name and labels are key
// (name{labels} as written), 0 when absent.
func metricValue(t testing.TB, url, key string) float64 {
	t.Helper()
	_, _, body := get(t, url, "/metrics")
	samples, _ := parseMetrics(t, string(body))
	for _, s := range samples {
		k := s.name
		if s.labels != "" {
			k += "{" + s.labels + "}"
		}
		if k == key {
			return s.value
		}
	}
	return 0
}

func TestMetrics(t *testing.T) {
	v := sharedEnv(t)
	post(t, v.ts.URL, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":8,"temperature":0}`)
	post(t, v.ts.URL, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":8,"temperature":0,"stream":true}`)
	post(t, v.ts.URL, "/v1/completions", `{"prompt":"x","n":3}`)
	get(t, v.ts.URL, "/nowhere")
	code, hdr, body := get(t, v.ts.URL, "/metrics")
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("status %d, content type %q", code, hdr.Get("Content-Type"))
	}
	samples, types := parseMetrics(t, string(body))
	find := func(name, labels string) (float64, bool) {
		for _, s := range samples {
			if s.name == name && strings.Contains(s.labels, labels) {
				return s.value, true
			}
		}
		return 0, false
	}
	for _, tc := range []struct {
		name, labels string
		min          float64
	}{
		{"reprise_requests_total", `endpoint="/v1/completions",code="200"`, 2},
		{"reprise_requests_total", `endpoint="/v1/completions",code="400"`, 1},
		{"reprise_requests_total", `endpoint="other",code="404"`, 1},
		{"reprise_requests_finished_total", `endpoint="/v1/completions",reason="length"`, 2},
		{"reprise_prompt_tokens_total", "", 1},
		{"reprise_completion_tokens_total", "", 16},
		{"reprise_generated_tokens_total", "", 16},
		{"reprise_time_to_first_token_seconds_count", `endpoint="/v1/completions"`, 2},
		{"reprise_request_duration_seconds_count", `endpoint="/v1/completions"`, 2},
		{"reprise_queue_depth", "", 0},
		{"reprise_running_requests", "", 0},
		{"reprise_requests_in_flight", "", 0},
		{"reprise_kv_pages_used", "", 0},
		{"reprise_kv_pages_free", "", 1},
		{"reprise_step_duration_seconds_count", `walk="decode",mode="replay"`, 1},
		{"reprise_step_duration_seconds_bucket", `walk="prefill",mode=`, 0},
		{"reprise_step_duration_seconds_count", `walk="prefill"`, 1},
		{"reprise_step_rows_total", `walk="decode",mode="replay"`, 1},
		{"reprise_graphs_enabled", "", 1},
		{"reprise_graph_replays_total", `runner="graphs",bucket=`, 1},
		{"reprise_graph_replays_total", `runner="blocks",bucket=`, 1},
		{"reprise_graph_padding_rows_total", `runner="graphs",bucket=`, 0},
		{"reprise_graph_real_rows_total", `runner="graphs",bucket=`, 1},
		{"reprise_graph_live_buckets", "", 2},
	} {
		got, ok := find(tc.name, tc.labels)
		if !ok || got < tc.min {
			t.Errorf("%s{%s} = %v (present %v), want at least %v", tc.name, tc.labels, got, ok, tc.min)
		}
	}
	for name, typ := range map[string]string{"reprise_requests_total": "counter", "reprise_queue_depth": "gauge",
		"reprise_step_duration_seconds": "histogram", "reprise_time_to_first_token_seconds": "histogram",
		"reprise_graph_eager_fallbacks_total": "counter"} {
		if types[name] != typ {
			t.Errorf("%s has type %q, want %q", name, types[name], typ)
		}
	}
	// Histogram buckets are cumulative and end at _count.
	var prev float64
	var series string
	for _, s := range samples {
		if !strings.HasSuffix(s.name, "_bucket") {
			continue
		}
		key := s.name + regexp.MustCompile(`,?le="[^"]*"`).ReplaceAllString(s.labels, "")
		if key != series {
			series, prev = key, 0
		}
		if s.value < prev {
			t.Errorf("%s{%s} = %v decreases from %v", s.name, s.labels, s.value, prev)
		}
		prev = s.value
		if strings.Contains(s.labels, `le="+Inf"`) {
			count, _ := find(strings.TrimSuffix(s.name, "_bucket")+"_count", regexp.MustCompile(`,?le="[^"]*"`).ReplaceAllString(s.labels, ""))
			if count != s.value {
				t.Errorf("%s{%s} = %v but _count is %v", s.name, s.labels, s.value, count)
			}
		}
	}
}
