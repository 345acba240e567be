package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"

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
finish for up to --shutdown-timeout, cancels what is left (each gets a final
error event, or a 503), and stops the engine; a second signal cancels at
once. The exit status is 1 when requests were cut, else 0.

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
	host            string
	port            int
	apiKey          string
	chatTemplate    string
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
	logFormat       string
	allowedOrigins  string
	enableReload    bool
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	f.df.register(fs, false)
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "`address` to listen on (host:port; port 0 picks a free one)")
	fs.StringVar(&f.host, "host", "", "`host` to listen on: replaces --listen's host (0.0.0.0 for every interface)")
	fs.IntVar(&f.port, "port", -1, "`port` to listen on: replaces --listen's port (0 picks a free one)")
	fs.StringVar(&f.chatTemplate, "chat-template", "", "Jinja chat template `file` for /v1/chat/completions (default: the model's own; none: messages joined by newlines)")
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
	fs.StringVar(&f.modelName, "model-name", "", "the model's name in the API (default: the model's own: general.name of a GGUF file, a Hugging Face directory's name, a llama2.c file's name without extension, stories260K)")
	fs.StringVar(&f.modelName, "served-model-name", "", "the same as --model-name (vLLM's spelling)")
	fs.DurationVar(&f.retryAfter, "retry-after", serve.DefaultRetryAfter, "Retry-After of a 429 (rounded up to seconds)")
	fs.StringVar(&f.debugListen, "debug-listen", "", "`address` to serve Go's profiler on (/debug/pprof/; off unless given: keep it private)")
	fs.StringVar(&f.allowedOrigins, "allowed-origins", "", "comma-separated `origins` browsers may call the API from (CORS; * for any; default none)")
	fs.StringVar(&f.logFormat, "log-format", "text", "logs as `text` (key=value) or json (one JSON object a line)")
	fs.StringVar(&f.planCache, "plan-cache", "", "directory of measured capture costs (default $"+envPlanCache+" or the user cache; off disables)")
	fs.BoolVar(&f.enableReload, "enable-reload", false, "serve POST /admin/reload {\"model\": PATH}: new weights of identical shapes, captured graphs updated in place (needs --api-key; docs/SERVING.md)")
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
	data, err := readConfig(f.config)
	if err != nil {
		return fmt.Errorf("%w: --config: %w", errUsage, err)
	}
	settings, err := parseConfig(data)
	if err != nil {
		return fmt.Errorf("%w: --config %s: %w", errUsage, f.config, err)
	}
	for _, st := range settings {
		name := strings.ReplaceAll(st.key, "_", "-")
		if name == "verbose" {
			name = "v"
		}
		if name == "config" || fs.Lookup(name) == nil {
			msg := fmt.Sprintf("line %d: unknown setting %q", st.line, st.key)
			if best := closestFlag(fs, name); best != "" && best != "config" {
				msg += fmt.Sprintf("; did you mean %s?", strings.ReplaceAll(best, "-", "_"))
			}
			return fmt.Errorf("%w: --config %s: %s", errUsage, f.config, msg)
		}
		if st.null || set[name] {
			continue
		}
		if err := setFlag(fs, name, st.value); err != nil {
			return fmt.Errorf("%w: --config %s: line %d: %s: %w", errUsage, f.config, st.line, st.key, err)
		}
	}
	return nil
}

// address is where to listen: --listen with --host and --port, when
// given, in place of its host and port.
func (f *serveFlags) address(fs *flag.FlagSet) (string, error) {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !set["host"] && !set["port"] {
		return f.listen, nil
	}
	host, port, err := net.SplitHostPort(f.listen)
	if err != nil {
		return "", fmt.Errorf("%w: --listen %q: %w", errUsage, f.listen, err)
	}
	if set["host"] {
		host = f.host
	}
	if set["port"] {
		if f.port < 0 || f.port > 65535 {
			return "", fmt.Errorf("%w: --port %d: want 0 to 65535", errUsage, f.port)
		}
		port = strconv.Itoa(f.port)
	}
	return net.JoinHostPort(host, port), nil
}

func (f *serveFlags) check() error {
	switch {
	case f.maxBatch < 1:
		return fmt.Errorf("%w: --max-batch %d: want at least 1", errUsage, f.maxBatch)
	case f.maxQueue < 0, f.maxTokens < 0, f.maxPromptTokens < 0, f.kvPages < 0:
		return fmt.Errorf("%w: --max-queue, --max-tokens, --max-prompt-tokens and --kv-pages must not be negative", errUsage)
	case f.shutdown < 0 || f.retryAfter < 0:
		return fmt.Errorf("%w: --shutdown-timeout and --retry-after must not be negative", errUsage)
	case f.logFormat != "text" && f.logFormat != "json":
		return fmt.Errorf("%w: --log-format %q: want text or json", errUsage, f.logFormat)
	case f.enableReload && f.apiKey == "":
		return fmt.Errorf("%w: --enable-reload needs --api-key (or $%s): /admin/reload is behind it", errUsage, EnvAPIKey)
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
		printFlags(fs)
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
	addr, err := f.address(fs)
	if err != nil {
		return err
	}
	f.listen = addr
	f.df.logJSON = f.logFormat == "json"
	lg := newLogger(stderr, f.df.logJSON)

	name := f.modelName
	prog := newCaptureProgress(stderr, lg)
	// The server logs at info (REPRISE_LOG), the engine too: its start-up
	// and "capture finished" lines are what an operator reads.
	eo := engine.Options{Logger: lg, Graphs: bool(f.graphs), BackgroundCapture: bool(f.graphs) && bool(f.background),
		MaxBatch: f.maxBatch, MaxQueue: f.maxQueue, KVPages: f.kvPages,
		PlanCache: f.planCache, Runner: graph.Options{Progress: prog.report}}
	sess, err := f.df.openSession(stderr, func(mo *llama.Options) {
		mo.Name = name
		mo.DecodeBatchSizes = decodeSizes(f.maxBatch)
		mo.LogProbGraphs, mo.PenaltyGraphs = true, true
	}, eo)
	if err != nil {
		return err
	}
	defer sess.Close()
	e, m, tok := sess.eng, sess.model, sess.tok
	if tok == nil {
		return fmt.Errorf("%w: the model has no tokenizer", errUsage)
	}
	ct, err := chatTemplate(sess.vocab, f.chatTemplate)
	if err != nil {
		return err
	}

	// The engine's loop runs until the server has shut down, not until the
	// signal: requests in flight finish first. A signal during a capture
	// before listening interrupts it.
	engineCtx, stopEngine := context.WithCancel(context.Background())
	defer stopEngine()
	unwatch := context.AfterFunc(ctx, stopEngine)
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

	var reload serve.Reloader
	if f.enableReload {
		reload = sess.reload
	}
	srv, err := serve.New(e, m.Info(), tok, serve.Options{ModelName: m.Info().Name, APIKey: f.apiKey, Chat: ct,
		MaxBodyBytes: int64(f.maxBody), MaxPromptTokens: f.maxPromptTokens, MaxTokens: f.maxTokens,
		RetryAfter: f.retryAfter, AllowedOrigins: serve.ParseOrigins(f.allowedOrigins), Reload: reload, Logger: lg})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	hs := srv.HTTPServer()
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
	case <-e.Done():
		// The engine stopped on its own: with graphs required, a bucket
		// background capture left out or dropped. The process exits
		// non-zero with the reason rather than serve eager; requests in
		// flight were sent the error.
		srv.Abort()
		hs.Close()
		err := e.Err()
		if err == nil {
			err = engine.ErrClosed
		}
		return fmt.Errorf("engine stopped: %w", err)
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
		// Forced: each generation left ends with an error event (or a 503),
		// then what has not finished in a moment is closed.
		lg.Warn("requests still in flight at the deadline are cancelled", "err", err)
		srv.Abort()
		grace, cancelGrace := context.WithTimeout(context.Background(), abortGrace)
		if hs.Shutdown(grace) != nil {
			hs.Close()
		}
		cancelGrace()
	}
	e.Close()
	if n := srv.Cut(); n > 0 {
		return fmt.Errorf("shutdown cut %d request(s) in flight (each was sent an error; --shutdown-timeout %s)", n, f.shutdown)
	}
	lg.Info("stopped")
	return nil
}

// abortGrace is how long a forced shutdown waits for the cut requests'
// final events to be written before it closes their connections.
const abortGrace = 2 * time.Second

// debugMux serves net/http/pprof's handlers, on their own listener so that
// the API's (which may be public) never exposes them.
func debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, r *http.Request) {
		// pprof.Cmdline, with the API key's value blanked out.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, strings.Join(redactArgs(os.Args), "\x00"))
	})
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// redactArgs is args with the value of --api-key (however written)
// replaced: the profiler's /debug/pprof/cmdline would show it otherwise.
// The key is safer in $REPRISE_API_KEY, which no process listing shows.
func redactArgs(args []string) []string {
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(out[i], "-"), "=")
		if !strings.HasPrefix(out[i], "-") || name != "api-key" {
			continue
		}
		if hasValue {
			out[i] = out[i][:strings.Index(out[i], "=")+1] + "REDACTED"
		} else if i+1 < len(out) {
			out[i+1] = "REDACTED"
			i++
		}
	}
	return out
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
	// A terminal, not just a character device: /dev/null is one too.
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.tty = true
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
