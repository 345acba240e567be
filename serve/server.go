package serve

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reprise-ml/reprise/engine"
)

// Defaults of Options.
const (
	DefaultMaxBodyBytes     = 1 << 20
	DefaultCompletionTokens = 16 // max_tokens of a completion that does not say (as OpenAI)
	DefaultRetryAfter       = time.Second
	DefaultBodyTimeout      = 30 * time.Second
	DefaultHeaderTimeout    = 10 * time.Second
	DefaultWriteTimeout     = 30 * time.Second
	DefaultIdleTimeout      = 2 * time.Minute
)

// Tokenizer turns text into the model's tokens and tokens back into the
// text the reference program prints (*llama2c.Tokenizer is one).
type Tokenizer interface {
	Encode(text string, bos, eos bool) []int
	SafePiece(prev, token int) []byte
}

// Options configure a Server. Zero values take the defaults.
type Options struct {
	// ModelName is the name the server answers to in "model" and lists in
	// /v1/models (default: the model's name).
	ModelName string
	// APIKey, when set, is required on /v1/* as "Authorization: Bearer KEY".
	APIKey string
	// MaxBodyBytes caps a request body (default DefaultMaxBodyBytes); past it
	// the answer is 413.
	MaxBodyBytes int64
	// MaxPromptTokens caps a prompt's tokens, BOS included (default: the
	// model's length).
	MaxPromptTokens int
	// MaxTokens caps max_tokens (default: the model's length).
	MaxTokens int
	// DefaultCompletionTokens is max_tokens of a completion that does not
	// say (default DefaultCompletionTokens). A chat completion that does
	// not say may use every position the prompt leaves, up to MaxTokens.
	DefaultCompletionTokens int
	// RetryAfter is the Retry-After of a 429 when the engine's queue is
	// full (default DefaultRetryAfter; rounded up to whole seconds).
	RetryAfter time.Duration
	// BodyTimeout bounds reading a request, headers and body together
	// (default DefaultBodyTimeout); the response may then take as long as
	// it needs.
	BodyTimeout time.Duration
	// WriteTimeout bounds each write of a response: a whole answer, or one
	// event of a stream, so that a client that stops reading is cut while a
	// long stream that is read goes on (default DefaultWriteTimeout).
	WriteTimeout time.Duration
	// AllowedOrigins are the origins browsers may call the API from
	// (CORS; "*": any). None by default: cross-origin calls are refused.
	AllowedOrigins []string
	// Chat is the model's chat template (nil: a chat request's message
	// contents are joined with newlines).
	Chat *ChatTemplate
	// Reload, when set, serves POST /admin/reload {"model": PATH}: new
	// weights of the served model's shapes, every captured graph updated
	// in place (engine.Engine.Reload). It needs APIKey: the route is behind
	// it. Nil: no such route.
	Reload Reloader
	// Logger (nil: slog.Default()).
	Logger *slog.Logger
}

// Server is the OpenAI-compatible HTTP API over an engine. It is an
// http.Handler; the caller owns the http.Server, the engine and their
// lifetimes (see Drain).
type Server struct {
	eng     *engine.Engine
	info    engine.ModelInfo
	tok     Tokenizer
	opts    Options
	mux     *http.ServeMux
	metrics *metrics
	// metricsHandler serves /metrics.
	metricsHandler http.Handler
	created        int64
	draining       atomic.Bool
	log            *slog.Logger
	// fingerprint is every response's system_fingerprint.
	fingerprint string
	// abort is closed by Abort: generations in flight end with an error.
	abort     chan struct{}
	abortOnce sync.Once
	cut       atomic.Int64 // generations Abort ended
	// bos is the tokenizer's beginning-of-sequence token (-1: none),
	// found on first use.
	bos func() int
}

// New makes the server for an engine running the model info describes,
// whose text tok encodes and decodes. The engine should be started (or be
// about to be): requests submitted before Start wait for it.
func New(e *engine.Engine, info engine.ModelInfo, tok Tokenizer, opts Options) (*Server, error) {
	if e == nil || tok == nil {
		return nil, errors.New("serve: an engine and a tokenizer are needed")
	}
	if info.MaxSeq < 1 {
		return nil, fmt.Errorf("serve: model %q has %d positions", info.Name, info.MaxSeq)
	}
	if opts.ModelName == "" {
		opts.ModelName = info.Name
	}
	if opts.ModelName == "" {
		return nil, errors.New("serve: the model has no name; set Options.ModelName")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxPromptTokens <= 0 || opts.MaxPromptTokens > info.MaxSeq {
		opts.MaxPromptTokens = info.MaxSeq
	}
	if opts.MaxTokens <= 0 || opts.MaxTokens > info.MaxSeq {
		opts.MaxTokens = info.MaxSeq
	}
	if opts.DefaultCompletionTokens <= 0 {
		opts.DefaultCompletionTokens = DefaultCompletionTokens
	}
	opts.DefaultCompletionTokens = min(opts.DefaultCompletionTokens, opts.MaxTokens)
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Reload != nil && opts.APIKey == "" {
		return nil, errors.New("serve: /admin/reload needs an API key (Options.APIKey)")
	}
	s := &Server{eng: e, info: info, tok: tok, opts: opts, mux: http.NewServeMux(), metrics: newMetrics(e, opts.ModelName),
		created: time.Now().Unix(), log: opts.Logger, fingerprint: fingerprint(info, opts.ModelName), abort: make(chan struct{})}
	s.bos = sync.OnceValue(func() int {
		if b := tok.Encode("", true, false); len(b) == 1 {
			return b[0]
		}
		return -1
	})
	s.metricsHandler = newMetricsHandler(s.metrics, slog.NewLogLogger(s.log.Handler(), slog.LevelWarn))
	s.routes()
	return s, nil
}

// HTTPServer is an http.Server for s with every phase of a connection
// bounded: the headers by DefaultHeaderTimeout, the whole request by
// Options.BodyTimeout (a generation lifts that bound once it has its body,
// so its stream is not cut), each write by Options.WriteTimeout, an idle
// keep-alive connection by DefaultIdleTimeout. A response to a request
// whose body was not read (an error, a refused key) closes the connection
// rather than waiting to drain the body.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{Handler: s, ReadHeaderTimeout: min(DefaultHeaderTimeout, s.opts.BodyTimeout),
		ReadTimeout: s.opts.BodyTimeout, IdleTimeout: DefaultIdleTimeout,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
}

// Options returns the server's options with their defaults filled in.
func (s *Server) Options() Options { return s.opts }

// Drain marks the server as shutting down: /health answers 503 and new
// generations are refused with 503, while those in flight go on. Call it
// before http.Server.Shutdown.
func (s *Server) Drain() { s.draining.Store(true) }

// Abort ends every generation in flight, and any that starts later, with
// a final error event (a 503 body when nothing was sent yet): what a forced
// shutdown does before http.Server.Close, so that no stream is cut without
// one. It returns at once; handlers finish soon after.
func (s *Server) Abort() {
	s.draining.Store(true)
	s.abortOnce.Do(func() { close(s.abort) })
}

// Cut is how many generations Abort ended before they finished.
func (s *Server) Cut() int64 { return s.cut.Load() }

// Paths the server answers.
const (
	pathCompletions = "/v1/completions"
	pathChat        = "/v1/chat/completions"
	pathModels      = "/v1/models"
	pathModel       = "/v1/models/{model}"
	pathHealth      = "/health"
	pathMetrics     = "/metrics"
)

func (s *Server) routes() {
	s.mux.HandleFunc("POST "+pathCompletions, s.handleGenerate(false))
	s.mux.HandleFunc("POST "+pathChat, s.handleGenerate(true))
	s.mux.HandleFunc("GET "+pathModels, s.handleModels)
	s.mux.HandleFunc("GET "+pathModel, s.handleModel)
	s.mux.HandleFunc("GET "+pathHealth, s.handleHealth)
	s.mux.HandleFunc("GET "+pathMetrics, s.handleMetrics)
	s.mux.HandleFunc("POST "+pathTokenize, s.handleTokenize)
	s.mux.HandleFunc("POST "+pathDetokenize, s.handleDetokenize)
	if s.opts.Reload != nil {
		s.mux.HandleFunc("POST "+pathReload, s.handleReload())
	}
	// The same paths with another method: 405 with an OpenAI-style body
	// (the mux's own answer is plain text).
	allow := map[string]string{pathCompletions: "POST", pathChat: "POST", pathTokenize: "POST", pathDetokenize: "POST", pathModels: "GET, HEAD", pathModel: "GET, HEAD",
		pathHealth: "GET, HEAD", pathMetrics: "GET, HEAD"}
	for path, methods := range allow {
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", methods)
			writeError(w, &apiError{status: http.StatusMethodNotAllowed, typ: typeInvalidRequest, code: "method_not_allowed",
				message: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, methods)})
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, typ: typeInvalidRequest, code: "not_found",
			message: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)})
	})
}

// ServeHTTP gives the request its id (the client's X-Request-Id, or a
// fresh one, echoed), checks the API key on /v1/*, serves the request,
// counts it by endpoint and status and writes its log line.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	_, pattern := s.mux.Handler(r)
	endpoint := endpointLabel(pattern)
	rec := &reqRecord{id: requestID(r)}
	w.Header().Set(headerRequestID, rec.id)
	r = r.WithContext(context.WithValue(r.Context(), recordKey{}, rec))
	sw := &statusWriter{ResponseWriter: w, writeTimeout: s.opts.WriteTimeout}
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		sw.body = &eofReader{ReadCloser: r.Body}
		r.Body = sw.body
	}
	defer func() {
		status := sw.status(r)
		s.metrics.request(endpoint, status)
		s.logRequest(r, endpoint, status, rec, time.Since(start))
	}()
	if s.cors(sw, r) {
		return
	}
	if s.opts.APIKey != "" && (r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/") || strings.HasPrefix(r.URL.Path, "/admin/")) && !s.authorized(r) {
		writeError(sw, &apiError{status: http.StatusUnauthorized, typ: typeInvalidRequest, code: "invalid_api_key",
			message: "missing or incorrect API key: send the header \"Authorization: Bearer KEY\" with the server's key"})
		return
	}
	s.mux.ServeHTTP(sw, r)
}

func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	got := strings.TrimSpace(h[len(prefix):])
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.APIKey)) == 1
}

// endpointLabel is the metrics label of a mux pattern: its path, or
// "other" for what no endpoint serves.
func endpointLabel(pattern string) string {
	if _, path, ok := strings.Cut(pattern, " "); ok {
		pattern = path
	}
	if pattern == "" || pattern == "/" {
		return "other"
	}
	return pattern
}

// statusWriter records the status code a handler answers, and closes the
// connection after a response to a request whose body was not read to its
// end: net/http would otherwise read the rest before answering, which a
// client that announced a body and never sends it holds for ever.
type statusWriter struct {
	http.ResponseWriter
	code int
	body *eofReader // nil: the request has no body
	// writeTimeout bounds the write of the response from its header on (a
	// stream sets a deadline per event).
	writeTimeout time.Duration
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
		if w.body != nil && !w.body.eof.Load() {
			w.Header().Set("Connection", "close")
		}
		if w.writeTimeout > 0 {
			_ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now().Add(w.writeTimeout))
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// eofReader is a request body that knows whether it was read to its end.
type eofReader struct {
	io.ReadCloser
	eof atomic.Bool
}

func (r *eofReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err == io.EOF {
		r.eof.Store(true)
	}
	return n, err
}

func (w *statusWriter) Flush() { w.FlushError() }

// FlushError flushes and reports a connection that is gone (what
// http.ResponseController.Flush calls).
func (w *statusWriter) FlushError() error {
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// status is the code to count: 499 (nginx's "client closed request") when
// the client left before anything was answered.
func (w *statusWriter) status(r *http.Request) int {
	if w.code == 0 {
		if r.Context().Err() != nil {
			return 499
		}
		return http.StatusOK
	}
	return w.code
}

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// MaxModelLen is the model's positions (an extension, as vLLM).
	MaxModelLen int `json:"max_model_len"`
	// ChatTemplate says how chat messages become the prompt (an extension).
	ChatTemplate string `json:"chat_template"`
}

func (s *Server) model() modelObject {
	return modelObject{ID: s.opts.ModelName, Object: "model", Created: s.created, OwnedBy: "reprise", MaxModelLen: s.info.MaxSeq,
		ChatTemplate: s.chatTemplateKind()}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []modelObject{s.model()}})
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	if name := r.PathValue("model"); name != s.opts.ModelName {
		writeError(w, s.modelNotFound(name))
		return
	}
	writeJSON(w, http.StatusOK, s.model())
}

func (s *Server) modelNotFound(name string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: typeInvalidRequest, param: "model", code: "model_not_found",
		message: fmt.Sprintf("the model %q does not exist; this server serves %q", name, s.opts.ModelName)}
}

// handleHealth answers 200 {"status": "ok", ...} while the server takes
// requests, 503 {"status": "draining", ...} once Drain was called, and 503
// {"status": "not_ready", "reason": ...} while the engine cannot serve as
// asked (graphs required and background capture still making buckets live,
// or the engine stopped: engine.GraphStats.Ready). The body also carries the
// model's name, whether graphs are on and how many buckets are live, and the
// engine's queue, running requests and KV pages.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	st, gs := s.eng.Stats(), s.eng.GraphStats()
	body := map[string]any{"status": "ok", "model": s.opts.ModelName, "graphs": len(gs.Runners) > 0,
		"live_buckets": gs.LiveBuckets, "waiting": st.Waiting, "running": st.Running,
		"kv_pages_used": st.KVPagesUsed, "kv_pages_free": st.KVPagesFree}

	code := http.StatusOK
	switch {
	case s.draining.Load():
		body["status"], code = "draining", http.StatusServiceUnavailable
	case !gs.Ready:
		body["status"], body["reason"], code = "not_ready", gs.NotReady, http.StatusServiceUnavailable
	}
	writeJSON(w, code, body)
}

// readBody reads a request body within the size and time limits. Once it
// has the body it lifts the read deadline (HTTPServer's ReadTimeout, or
// the one set here), so the response may take as long as it needs; on an
// error the deadline stays and the connection closes after the answer.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	inner := w // MaxBytesReader tells the server's own writer to close the connection
	if u, ok := w.(interface{ Unwrap() http.ResponseWriter }); ok {
		inner = u.Unwrap()
	}
	body, err := io.ReadAll(http.MaxBytesReader(inner, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, typ: typeInvalidRequest, code: "request_too_large",
				message: fmt.Sprintf("the request body is larger than this server's limit of %d bytes", s.opts.MaxBodyBytes)}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &apiError{status: http.StatusRequestTimeout, typ: typeInvalidRequest, code: "request_timeout",
				message: fmt.Sprintf("the request body did not arrive within %s", s.opts.BodyTimeout)}
		}
		return nil, badRequest("", codeInvalidJSON, "could not read the request body: %v", err)
	}
	_ = rc.SetReadDeadline(time.Time{})
	return body, nil
}

// writeDeadline bounds the next write of a response.
func (s *Server) writeDeadline(rc *http.ResponseController) {
	_ = rc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
}
