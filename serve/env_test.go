package serve_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/reprise-ml/reprise/accel"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/serve"
)

// testModel captures few prefill buckets, to keep the race-instrumented
// suite quick.
var testModel = llama.Options{PrefillLengths: []int{16, 32, 64}, PrefillBatchSizes: []int{1, 8}, LogProbGraphs: true, PenaltyGraphs: true}

// env is a real engine on the CPU device, with graphs, running the embedded
// model, and a server over it.
type env struct {
	dev  accel.Device
	m    *llama.Model
	tok  *llama2c.Tokenizer
	ck   *llama2c.Checkpoint
	e    *engine.Engine
	stop context.CancelFunc
	srv  *serve.Server
	ts   *httptest.Server
}

func (v *env) close() {
	v.ts.Close()
	v.e.Close()
	v.stop()
	v.m.Close()
	v.dev.Close()
}

func newEnv(eo engine.Options, so serve.Options, start bool) (*env, error) {
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 1 << 30})
	if err != nil {
		return nil, err
	}
	m, tok, err := llama.Open(dev, llama.Source{}, testModel)
	if err != nil {
		dev.Close()
		return nil, err
	}
	ck, _, err := llama.Default()
	if err != nil {
		return nil, err
	}
	quiet := quietLogger()
	eo.Logger, so.Logger = quiet, quiet
	e, err := engine.New(dev, m, eo)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if start {
		if err := e.Start(ctx); err != nil {
			cancel()
			return nil, err
		}
	}
	srv, err := serve.New(e, m.Info(), tok, so)
	if err != nil {
		cancel()
		return nil, err
	}
	return &env{dev: dev, m: m, tok: tok, ck: ck, e: e, stop: cancel, srv: srv, ts: httptest.NewServer(srv)}, nil
}

// quietLogger logs warnings and errors only.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

var shared struct {
	once sync.Once
	env  *env
	err  error
}

// sharedEnv is the package's one captured engine and server, started on
// first use; tests that need other server options wrap the same engine in
// another serve.Server (see withServer).
func sharedEnv(t testing.TB) *env {
	t.Helper()
	shared.once.Do(func() {
		shared.env, shared.err = newEnv(engine.Options{Graphs: true}, serve.Options{}, true)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.env
}

// withServer is a server with other options over the shared engine.
func withServer(t testing.TB, so serve.Options) *httptest.Server {
	t.Helper()
	v := sharedEnv(t)
	if so.Logger == nil {
		so.Logger = quietLogger()
	}
	srv, err := serve.New(v.e, v.m.Info(), v.tok, so)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.env != nil {
		shared.env.close()
	}
	os.Exit(code)
}

func client(url string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(url + "/v1/"), option.WithAPIKey("unused"),
		option.WithMaxRetries(0), option.WithRequestTimeout(2 * time.Minute)}, opts...)...)
}

// reference is what `reprise generate` prints after the prompt for a
// greedy continuation of at most maxTokens tokens: llama2c.Generate's
// output less the prompt's pieces and the final newline.
func (v *env) reference(t testing.TB, prompt string, maxTokens int) string {
	t.Helper()
	ids := v.tok.Encode(prompt, true, false)
	var head []byte
	for i := 1; i < len(ids); i++ {
		head = append(head, v.tok.SafePiece(ids[i-1], ids[i])...)
	}
	out := llama2c.Generate(v.ck, v.tok, prompt, len(ids)+maxTokens-1)
	if !strings.HasPrefix(out, string(head)) || !strings.HasSuffix(out, "\n") {
		t.Fatalf("reference output %q does not start with the prompt's pieces %q", out, head)
	}
	return strings.TrimSuffix(strings.TrimPrefix(out, string(head)), "\n")
}

// post sends a JSON body and returns the status, headers and body.
func post(t testing.TB, url, path, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return do(t, req)
}

func get(t testing.TB, url, path string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return do(t, req)
}

func do(t testing.TB, req *http.Request) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// apiErr is an OpenAI error body.
type apiErr struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decodeErr(t testing.TB, body []byte) apiErr {
	t.Helper()
	var e apiErr
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("not an OpenAI error body (%v): %s", err, body)
	}
	return e
}

// sseEvents reads a server-sent event stream's data lines.
func sseEvents(t testing.TB, r io.Reader) []string {
	t.Helper()
	var events []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("stream line %q is not a data line", line)
		}
		events = append(events, data)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return events
}
