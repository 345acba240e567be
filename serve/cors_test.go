package serve_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/reprise-ml/reprise/serve"
)

func options(t *testing.T, url, path string, header ...string) (int, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodOptions, url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	code, hdr, _ := do(t, req)
	return code, hdr
}

// Preflights from an allowed origin are answered (before the API key:
// browsers send them without one), others refused; actual requests from an
// allowed origin carry Access-Control-Allow-Origin; without allowed origins
// nothing is allowed.
func TestCORS(t *testing.T) {
	const allowed, other = "https://app.example", "https://evil.example"
	ts := withServer(t, serve.Options{AllowedOrigins: []string{allowed}, APIKey: "k"})
	pre := []string{"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type"}

	code, hdr := options(t, ts.URL, "/v1/chat/completions", append([]string{"Origin", allowed}, pre...)...)
	if code != http.StatusNoContent || hdr.Get("Access-Control-Allow-Origin") != allowed ||
		hdr.Get("Access-Control-Allow-Headers") != "authorization,content-type" || hdr.Get("Access-Control-Allow-Methods") == "" ||
		!slices.Contains(hdr.Values("Vary"), "Origin") {
		t.Errorf("allowed preflight: %d %v", code, hdr)
	}
	code, hdr = options(t, ts.URL, "/v1/chat/completions", append([]string{"Origin", other}, pre...)...)
	if code != http.StatusForbidden || hdr.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("refused preflight: %d %v", code, hdr)
	}

	code, hdr, body := post(t, ts.URL, "/v1/completions", `{"prompt":"x","max_tokens":1}`,
		"Origin", allowed, "Authorization", "Bearer k")
	if code != http.StatusOK || hdr.Get("Access-Control-Allow-Origin") != allowed || hdr.Get("Access-Control-Expose-Headers") == "" {
		t.Errorf("request from an allowed origin: %d %v %s", code, hdr, body)
	}
	code, hdr, _ = post(t, ts.URL, "/v1/completions", `{"prompt":"x","max_tokens":1}`, "Origin", other, "Authorization", "Bearer k")
	if code != http.StatusOK || hdr.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("request from another origin: %d %v", code, hdr)
	}
	// A preflight still needs the key's check on the real request.
	if code, _, _ := post(t, ts.URL, "/v1/completions", `{"prompt":"x"}`, "Origin", allowed); code != http.StatusUnauthorized {
		t.Errorf("request without the key: %d", code)
	}

	any := withServer(t, serve.Options{AllowedOrigins: serve.ParseOrigins(" * ")})
	if code, hdr := options(t, any.URL, "/v1/models", append([]string{"Origin", other}, pre...)...); code != http.StatusNoContent ||
		hdr.Get("Access-Control-Allow-Origin") != other {
		t.Errorf("preflight with *: %d %v", code, hdr)
	}
	none := withServer(t, serve.Options{})
	if code, hdr := options(t, none.URL, "/v1/models", append([]string{"Origin", allowed}, pre...)...); code != http.StatusForbidden ||
		hdr.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight with no allowed origins: %d %v", code, hdr)
	}
	// A plain OPTIONS (no preflight) is still a wrong method.
	if code, _ := options(t, none.URL, "/v1/models"); code != http.StatusMethodNotAllowed {
		t.Errorf("plain OPTIONS: %d", code)
	}
	if got := serve.ParseOrigins("https://a.example/, ,http://b.example:8080"); !slices.Equal(got, []string{"https://a.example", "http://b.example:8080"}) {
		t.Errorf("ParseOrigins: %q", got)
	}
}
