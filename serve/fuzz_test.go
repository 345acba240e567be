package serve

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// Streamed text equals the whole text cut at the first stop sequence,
// however the text is split into pieces.
func FuzzStopper(f *testing.F) {
	f.Add("Once upon a time, the end.", "the", "", []byte{3, 7, 1})
	f.Add("aaab", "aab", "b", []byte{1, 1, 1})
	f.Add("line\n\nmore", "\n\n", "e\n", []byte{5})
	f.Add("héllo wörld", "ö", "llo w", []byte{2, 1, 1, 1})
	f.Add("héllo wöro wld", " ", "llo w", []byte{6, 1})
	f.Fuzz(func(t *testing.T, text, s1, s2 string, cuts []byte) {
		var stops []string
		for _, s := range []string{s1, s2} {
			if s != "" {
				stops = append(stops, s)
			}
		}
		want, wantMatch := text, false
		// The first stop to complete (the smallest end, then the earliest
		// start): a generation stops there.
		at, end := -1, 0
		for _, s := range stops {
			if i := strings.Index(text, s); i >= 0 && (at < 0 || i+len(s) < end || i+len(s) == end && i < at) {
				at, end = i, i+len(s)
			}
		}
		if at >= 0 {
			want, wantMatch = text[:at], true
		}
		st := newStopper(stops)
		var released strings.Builder
		rest, matched := text, false
		for i := 0; len(rest) > 0 && !matched; i++ {
			n := len(rest)
			if i < len(cuts) {
				n = min(n, int(cuts[i])%8+1)
			}
			var out string
			out, matched = st.add([]byte(rest[:n]))
			released.WriteString(out)
			rest = rest[n:]
		}
		if !matched {
			released.WriteString(st.flush())
		}
		if released.String() != want || st.result() != want || matched != wantMatch {
			t.Fatalf("text %q stops %q: released %q, result %q, matched %v; want %q, %v",
				text, stops, released.String(), st.result(), matched, want, wantMatch)
		}
	})
}

var fuzzServer struct {
	once sync.Once
	srv  *Server
	err  error
}

// closedServer is a Server over an engine that is already closed: every
// request is parsed, tokenized, checked and validated, and a valid one is
// then refused with 503 by Submit, so a fuzzer drives the whole request
// path without generating.
func closedServer(t testing.TB) *Server {
	fuzzServer.once.Do(func() {
		dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 64 << 20})
		if err != nil {
			fuzzServer.err = err
			return
		}
		m, tok, err := llama.Open(dev, llama.Source{}, llama.Options{PrefillLengths: []int{16}, PrefillBatchSizes: []int{1}})
		if err != nil {
			fuzzServer.err = err
			return
		}
		e, err := engine.New(dev, m, engine.Options{PlanCache: "off", Logger: quietLogger()})
		if err != nil {
			fuzzServer.err = err
			return
		}
		e.Close()
		fuzzServer.srv, fuzzServer.err = New(e, m.Info(), tok, Options{Logger: quietLogger()})
	})
	if fuzzServer.err != nil {
		t.Fatal(fuzzServer.err)
	}
	return fuzzServer.srv
}

// The request parser never panics, and every request it refuses gets a 4xx
// with OpenAI's error body.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"Once upon a time","max_tokens":4,"temperature":0}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":["x"],"stop":["a","b"],"seed":3,"top_p":0.5,"top_k":2,"n":1,"logit_bias":{}}`,
		`{"prompt":[1,2,3]}`, `[1]`, `{"prompt":"x","prompt":"y"}`, `{"prompt":"x","max_tokens":1e99}`,
		`{"messages":[{"role":"tool","content":"x"}]}`, `{"prompt":"` + strings.Repeat("a", 3000) + `"}`, ``, `nul`,
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, body string, chat bool) {
		srv := closedServer(t)
		path := pathCompletions
		if chat {
			path = pathChat
		}
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code == http.StatusServiceUnavailable {
			return // valid: refused by the closed engine
		}
		if w.Code < 400 || w.Code >= 500 {
			t.Fatalf("%q: status %d, want a 4xx: %s", body, w.Code, w.Body)
		}
		var e struct {
			Error struct {
				Message *string         `json:"message"`
				Type    *string         `json:"type"`
				Param   json.RawMessage `json:"param"`
				Code    json.RawMessage `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Message == nil || *e.Error.Message == "" ||
			e.Error.Type == nil || e.Error.Param == nil || e.Error.Code == nil {
			t.Fatalf("%q: status %d with a body not in OpenAI's error shape: %s", body, w.Code, w.Body)
		}
	})
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
