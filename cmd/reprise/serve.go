package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/serve"
)

func init() {
	register(command{name: "serve", summary: "serve an OpenAI-compatible API (completions, chat, streaming) with continuous batching", run: runServe})
}

// EnvAPIKey is the environment variable `reprise serve` and `reprise
// loadtest` read the API key from when --api-key is not given.
const EnvAPIKey = "REPRISE_API_KEY"

const serveUsage = `Usage: reprise serve [flags]

Serves the model (the embedded stories260K unless --model says) over an
OpenAI-compatible HTTP API: POST /v1/completions, POST /v1/chat/completions
(whole or streamed as server-sent events), GET /v1/models, GET /health and
GET /metrics (Prometheus). See the serve package's documentation for the
parameters taken and refused.

Settings come from, by precedence: flags, then $` + EnvAPIKey + ` (for the API
key), then the YAML file of --config, then the defaults. The YAML file's keys
are the flags' names with "_" for "-" (api_key, max_batch, shutdown_timeout,
device_memory_fraction, ..., and verbose for -v), with the values the flags
take, for example:

    listen: 0.0.0.0:8080
    api_key: sekrit
    graphs: on
    max_batch: 32
    max_body_bytes: 2MiB
    shutdown_timeout: 1m

On SIGINT or SIGTERM the server stops accepting, lets the requests in flight
finish for up to --shutdown-timeout, cancels what is left, and stops the
engine; a second signal cancels at once.

Flags:
`

// byteSize is a flag of bytes: a number, or one with a unit (KiB, MiB, GiB).
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	n, err := cpu.ParseBytes(s)
	if err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("want a positive size, not %q", s)
	}
	*b = byteSize(n)
	return nil
}

// serveFlags are `reprise serve`'s settings.
type serveFlags struct {
	df              deviceFlags
	listen          string
	apiKey          string
	config          string
	graphs          onOff
	background      onOff
	maxBatch        int
	maxQueue        int
	maxTokens       int
	maxPromptTokens int
	maxBody         byteSize
	shutdown        time.Duration
	kvPages         int
	modelName       string
	retryAfter      time.Duration
	planCache       string
	debugListen     string
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	f.df.register(fs, false)
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "`address` to listen on (host:port; port 0 picks a free one)")
	fs.StringVar(&f.apiKey, "api-key", "", "API key required on /v1/* as \"Authorization: Bearer KEY\" (default $"+EnvAPIKey+"; none: open)")
	fs.StringVar(&f.config, "config", "", "YAML `file` of settings (keys: the flags' names with _ for -); flags override it")
	f.graphs = true
	fs.Var(&f.graphs, "graphs", "capture and replay graphs: on or off (off runs every step eager)")
	f.background = true
	fs.Var(&f.background, "background-capture", "with graphs on: listen at once and serve eager while graphs are captured between steps, each going live when checked (on), or capture first and listen after (off)")
	fs.IntVar(&f.maxBatch, "max-batch", 64, "most requests decoded together (decode graphs are captured up to it)")
	fs.IntVar(&f.maxQueue, "max-queue", 256, "most requests waiting for the engine; past it the server answers 429 with Retry-After (0: unbounded)")
	fs.IntVar(&f.maxTokens, "max-tokens", 0, "cap on a request's max_tokens (0: the model's length)")
	fs.IntVar(&f.maxPromptTokens, "max-prompt-tokens", 0, "cap on a prompt's tokens, BOS included (0: the model's length)")
	f.maxBody = serve.DefaultMaxBodyBytes
	fs.Var(&f.maxBody, "max-body-bytes", "cap on a request body, e.g. 1MiB; past it the answer is 413")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long requests in flight may take to finish before they are cancelled")
	fs.IntVar(&f.kvPages, "kv-pages", 0, "KV cache pages of 16 positions, the sink included (0: enough for --max-batch requests of the model's length, within half the free device memory)")
	fs.StringVar(&f.modelName, "model-name", "", "the model's name in the API (default stories260K, or --model's file name without extension)")
	fs.DurationVar(&f.retryAfter, "retry-after", serve.DefaultRetryAfter, "Retry-After of a 429 (rounded up to seconds)")
	fs.StringVar(&f.debugListen, "debug-listen", "", "`address` to serve Go's profiler on (/debug/pprof/; off unless given: keep it private)")
	fs.StringVar(&f.planCache, "plan-cache", "", "directory of measured capture costs (default $"+envPlanCache+" or the user cache; off disables)")
}

// applyConfig sets, from the YAML file, every flag the command line did not
// set; the API key comes from the environment before the file.
func (f *serveFlags) applyConfig(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !set["api-key"] {
		if k := os.Getenv(EnvAPIKey); k != "" {
			f.apiKey = k
			set["api-key"] = true
		}
	}
	if f.config == "" {
		return nil
	}
	data, err := os.ReadFile(f.config)
	if err != nil {
		return fmt.Errorf("%w: --config: %v", errUsage, err)
	}
	var kv map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&kv); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: --config %s: %v", errUsage, f.config, err)
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		name := strings.ReplaceAll(key, "_", "-")
		if name == "verbose" {
			name = "v"
		}
		if name == "config" || fs.Lookup(name) == nil {
			return fmt.Errorf("%w: --config %s: unknown setting %q", errUsage, f.config, key)
		}
		var val string
		switch v := kv[key].(type) {
		case nil:
			continue
		case string, bool, int, int64, uint64, float64:
			val = fmt.Sprint(v)
		default:
			return fmt.Errorf("%w: --config %s: %s: want a single value, not %T", errUsage, f.config, key, v)
		}
		if set[name] {
			continue
		}
		if err := fs.Set(name, val); err != nil {
			return fmt.Errorf("%w: --config %s: %s: %v", errUsage, f.config, key, err)
		}
	}
	return nil
}

func (f *serveFlags) check() error {
	switch {
	case f.maxBatch < 1:
		return fmt.Errorf("%w: --max-batch %d: want at least 1", errUsage, f.maxBatch)
	case f.maxQueue < 0, f.maxTokens < 0, f.maxPromptTokens < 0, f.kvPages < 0:
		return fmt.Errorf("%w: --max-queue, --max-tokens, --max-prompt-tokens and --kv-pages must not be negative", errUsage)
	case f.shutdown < 0 || f.retryAfter < 0:
		return fmt.Errorf("%w: --shutdown-timeout and --retry-after must not be negative", errUsage)
	case f.df.model.Model != "" && f.df.model.Tokenizer == "":
		return fmt.Errorf("%w: --model needs its --tokenizer", errUsage)
	}
	return nil
}

// decodeSizes are the decode batch sizes to capture for a largest batch:
// powers of two below it, and it.
func decodeSizes(maxBatch int) []int {
	var s []int
	for n := 1; n < maxBatch; n *= 2 {
		s = append(s, n)
	}
	return append(s, maxBatch)
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	var f serveFlags
	f.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := f.applyConfig(fs); err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	lg := logger(stderr)

	name := f.modelName
	if name == "" && f.df.model.Model != "" {
		base := filepath.Base(f.df.model.Model)
		name = strings.TrimSuffix(base, filepath.Ext(base))
	}
	prog := newCaptureProgress(stderr, lg)
	eo := engine.Options{Graphs: bool(f.graphs), BackgroundCapture: bool(f.graphs) && bool(f.background),
		MaxBatch: f.maxBatch, MaxQueue: f.maxQueue, KVPages: f.kvPages,
		PlanCache: f.planCache, Runner: graph.Options{Progress: prog.report}}
	sess, err := f.df.openSession(stderr, func(mo *llama.Options) {
		mo.Name = name
		mo.DecodeBatchSizes = decodeSizes(f.maxBatch)
	}, eo)
	if err != nil {
		return err
	}
	defer sess.Close()
	e, m, tok := sess.eng, sess.model, sess.tok
	if tok == nil {
		return fmt.Errorf("%w: the model has no tokenizer", errUsage)
	}

	// The engine's loop runs until the server has shut down, not until the
	// signal: requests in flight finish first. A signal during a capture
	// before listening interrupts it.
	engineCtx, stopEngine := context.WithCancel(context.Background())
	defer stopEngine()
	unwatch := context.AfterFunc(ctx, stopEngine)
	t0 := time.Now()
	if eo.Graphs && !eo.BackgroundCapture {
		lg.Info("capturing graphs before listening", "model", m.Info().Name)
	}
	err = e.Start(engineCtx)
	if !unwatch() {
		lg.Info("interrupted before listening")
		return nil
	}
	if err != nil {
		return err
	}
	if eo.Graphs && !eo.BackgroundCapture {
		lg.Info("graphs captured", "seconds", fmt.Sprintf("%.2f", time.Since(t0).Seconds()))
	}

	srv, err := serve.New(e, m.Info(), tok, serve.Options{ModelName: m.Info().Name, APIKey: f.apiKey,
		MaxBodyBytes: int64(f.maxBody), MaxPromptTokens: f.maxPromptTokens, MaxTokens: f.maxTokens,
		RetryAfter: f.retryAfter, Logger: lg})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(lg.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	if f.debugListen != "" {
		dln, err := net.Listen("tcp", f.debugListen)
		if err != nil {
			hs.Close()
			return fmt.Errorf("--debug-listen: %w", err)
		}
		ds := &http.Server{Handler: debugMux(), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(lg.Handler(), slog.LevelWarn)}
		go ds.Serve(dln)
		defer ds.Close()
		fmt.Fprintf(stderr, "reprise serve: profiler on http://%s/debug/pprof/\n", dln.Addr())
	}
	mode := "eager"
	switch {
	case eo.BackgroundCapture:
		mode = "eager while graphs are captured in the background"
	case eo.Graphs:
		mode = "graphs"
	}
	// Said whatever the log level: it is how a user (and a script) learns
	// the address.
	fmt.Fprintf(stderr, "reprise serve: listening on http://%s (model %s, %s, API key %s)\n", ln.Addr(), srv.Options().ModelName,
		mode, map[bool]string{true: "required", false: "not required"}[f.apiKey != ""])

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	}

	// Graceful shutdown: stop accepting, let requests in flight finish up to
	// the deadline (or a second signal), cancel what is left, stop the
	// engine.
	srv.Drain()
	lg.Info("shutting down: finishing requests in flight", "timeout", f.shutdown)
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdown)
	defer cancel()
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	go func() {
		select {
		case <-again:
			lg.Info("second signal: cancelling requests in flight")
			cancel()
		case <-sctx.Done():
		}
	}()
	if err := hs.Shutdown(sctx); err != nil {
		lg.Warn("requests still in flight at the deadline are cancelled", "err", err)
		hs.Close()
	}
	e.Close()
	lg.Info("stopped")
	return nil
}

// debugMux serves net/http/pprof's handlers, on their own listener so that
// the API's (which may be public) never exposes them.
func debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// captureProgress shows graph capture: a progress bar when stderr is a
// terminal, log lines otherwise.
type captureProgress struct {
	w   io.Writer
	tty bool
	log *slog.Logger
	mu  sync.Mutex
}

func newCaptureProgress(w io.Writer, lg *slog.Logger) *captureProgress {
	p := &captureProgress{w: w, log: lg}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

const barWidth = 30

// report is the runner's Progress callback: called after each capture.
func (p *captureProgress) report(done, total int, spec graph.SlotSpec, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	name := spec.Bucket.String()
	if !p.tty {
		if err != nil {
			p.log.Warn("graph capture failed; its steps run eager", "done", done, "total", total, "bucket", name, "err", err)
		} else {
			p.log.Info("graph captured", "done", done, "total", total, "bucket", name)
		}
		return
	}
	if err != nil {
		fmt.Fprintf(p.w, "\r\033[Kcapture of %s failed (its steps run eager): %v\n", name, err)
	}
	filled := barWidth
	if total > 0 {
		filled = barWidth * done / total
	}
	fmt.Fprintf(p.w, "\r\033[Kcapturing graphs [%s%s] %d/%d %s", strings.Repeat("=", filled), strings.Repeat(" ", barWidth-filled), done, total, name)
	if done >= total {
		fmt.Fprintln(p.w)
	}
}
