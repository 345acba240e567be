package serve

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/reprise-ml/reprise/engine"
)

// headerRequestID is the header a request's id is taken from and echoed in.
const headerRequestID = "X-Request-Id"

// maxRequestIDLen bounds a client's X-Request-Id; a longer one, or one
// with characters outside printable ASCII, is replaced by a fresh id.
const maxRequestIDLen = 128

// reqRecord is what one request's log line says, filled in by the handler
// as it learns it. Only the request's own goroutine touches it.
type reqRecord struct {
	id           string
	model        string
	finish       string
	promptTokens int
	outputTokens int
	queue        time.Duration // Submit to admission into a prefill; 0 if never admitted
	ttft         time.Duration // arrival to the first token; 0 if none
	generated    bool          // it reached the engine
}

type recordKey struct{}

// record is the request's log record (a throwaway one outside ServeHTTP).
func record(ctx context.Context) *reqRecord {
	if r, ok := ctx.Value(recordKey{}).(*reqRecord); ok {
		return r
	}
	return &reqRecord{id: newRequestID()}
}

// requestID is the client's X-Request-Id when it is usable, else a fresh
// one.
func requestID(r *http.Request) string {
	id := r.Header.Get(headerRequestID)
	if id == "" || len(id) > maxRequestIDLen {
		return newRequestID()
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return newRequestID()
		}
	}
	return id
}

func newRequestID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// logRequest writes the request's one log line: API requests at INFO,
// health checks and metrics scrapes at DEBUG (a scraper would flood the
// log), 5xx answers at WARN but for 503 (shutting down: expected).
func (s *Server) logRequest(r *http.Request, endpoint string, status int, rec *reqRecord, total time.Duration) {
	lvl := slog.LevelInfo
	switch {
	case status >= 500 && status != http.StatusServiceUnavailable:
		lvl = slog.LevelWarn
	case r.URL.Path == pathHealth || r.URL.Path == pathMetrics:
		lvl = slog.LevelDebug
	}
	ctx := context.Background()
	if !s.log.Enabled(ctx, lvl) {
		return
	}
	attrs := []slog.Attr{slog.String("request_id", rec.id), slog.String("method", r.Method), slog.String("endpoint", endpoint),
		slog.Int("status", status), slog.String("client", r.RemoteAddr)}
	if rec.generated {
		attrs = append(attrs, slog.String("model", rec.model), slog.String("finish_reason", rec.finish),
			slog.Int("prompt_tokens", rec.promptTokens), slog.Int("output_tokens", rec.outputTokens),
			slog.Float64("queue_s", rec.queue.Seconds()), slog.Float64("ttft_s", rec.ttft.Seconds()))
	}
	attrs = append(attrs, slog.Float64("total_s", total.Seconds()))
	s.log.LogAttrs(ctx, lvl, "request", attrs...)
}

// fingerprint is the system_fingerprint of the responses: what model and
// engine configuration produced them (OpenAI's "the backend configuration
// the model runs with"), stable across restarts of the same setup.
func fingerprint(info engine.ModelInfo, name string) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("reprise\x00%s\x00%s\x00%d\x00%d\x00%d\x00%d\x00%d\x00%d\x00%d",
		name, info.Name, info.Layers, info.KVHeads, info.HeadSize, info.Vocab, info.MaxSeq, info.Params, info.WeightBytes)))
	return "fp_" + hex.EncodeToString(h[:5])
}
