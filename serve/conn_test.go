package serve_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/serve"
)

// connServer serves the shared engine through serve's own http.Server
// (the one `reprise serve` runs) with short read and write bounds.
func connServer(t *testing.T, so serve.Options) string {
	t.Helper()
	v := sharedEnv(t)
	so.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := serve.New(v.e, v.m.Info(), v.tok, so)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// halfOpen sends a request's head announcing a body and only part of it,
// then reads what the server answers until it closes the connection. It
// fails the test if the server holds the connection past limit.
func halfOpen(t *testing.T, addr, head string, partial string, limit time.Duration) (status int, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, head+partial); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(limit))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%q: no answer within %s: %v", strings.SplitN(head, "\r\n", 2)[0], limit, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The server closes the connection rather than wait for the rest.
	_, err = br.ReadByte()
	return resp.StatusCode, err == io.EOF
}

// Connections that announce a body and never send it are answered and
// closed within the read bound, authenticated or not, and a stream that
// outlasts the bound is not cut.
func TestHalfOpenConnections(t *testing.T) {
	const bound = 300 * time.Millisecond
	addr := connServer(t, serve.Options{APIKey: "k", BodyTimeout: bound})
	limit := 20 * time.Second // generous: only "for ever" fails
	post := func(path, auth string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: 1000\r\n\r\n", path, auth)
	}
	for _, tc := range []struct {
		name, head, partial string
		want                int
	}{
		{"authenticated, body stalls", post("/v1/completions", "Authorization: Bearer k\r\n"), `{"prompt":`, http.StatusRequestTimeout},
		{"unauthenticated, no body", post("/v1/completions", ""), "", http.StatusUnauthorized},
		{"unknown path", post("/v1/nothing", "Authorization: Bearer k\r\n"), "{", http.StatusNotFound},
		{"health with a body", "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n", "", http.StatusOK},
	} {
		code, closed := halfOpen(t, addr, tc.head, tc.partial, limit)
		if code != tc.want || !closed {
			t.Errorf("%s: status %d (want %d), connection closed %v", tc.name, code, tc.want, closed)
		}
	}
	// Headers that never end are cut too.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
	c.SetReadDeadline(time.Now().Add(limit))
	if _, err := io.ReadAll(c); err != nil {
		t.Errorf("a request whose headers never end was held: %v", err)
	}
	c.Close()

	// Many at once do not lock a new client out.
	var conns []net.Conn
	for range 64 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, post("/v1/completions", ""))
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(limit))
		if _, err := io.ReadAll(c); err != nil {
			t.Errorf("a half-open connection was held: %v", err)
		}
		c.Close()
	}

	// A stream read slowly, for longer than the read bound, finishes.
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/completions", strings.NewReader(
		`{"prompt":"Once upon a time","max_tokens":40,"temperature":0,"stream":true}`))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start, sc := time.Now(), bufio.NewScanner(resp.Body)
	done, finished := false, false
	for sc.Scan() {
		line := sc.Text()
		time.Sleep(bound / 20)
		done = done || line == "data: [DONE]"
		finished = finished || strings.Contains(line, `"finish_reason":"length"`)
	}
	if !done || !finished {
		t.Errorf("a stream of %s was cut (read bound %s): [DONE] %v, finish_reason %v", time.Since(start), bound, done, finished)
	}
	if time.Since(start) < bound {
		t.Logf("the stream took %s, less than the bound %s: the check proves less", time.Since(start), bound)
	}
}
