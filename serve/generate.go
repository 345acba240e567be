package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/internal/failpoint"
)

// DefaultTemperature is the temperature of a request that does not say
// (OpenAI's default): sampled, not greedy. Send "temperature": 0 for
// greedy decoding.
const DefaultTemperature = 1.0

// job is a checked request, ready for the engine.
type job struct {
	p      *genParams
	prompt []int
	req    engine.Request
}

// prepare tokenizes a parsed request and applies the server's limits, then
// engine.Validate: nothing reaches the engine unchecked.
func (s *Server) prepare(ctx context.Context, p *genParams) (*job, *apiError) {
	if p.model != "" && p.model != s.opts.ModelName {
		return nil, s.modelNotFound(p.model)
	}
	promptArg := "prompt"
	if p.chat {
		promptArg = "messages"
	}
	bos := true
	if p.chat && s.opts.Chat != nil {
		text, aerr := s.opts.Chat.render(p)
		if aerr != nil {
			return nil, aerr
		}
		// A template that writes BOS itself gets no second one.
		p.text, bos = text, !s.opts.Chat.writesBOS(text)
	}
	// A text too long to fit is refused before it is encoded: encoding
	// costs time in the text's length, a client's to spend only on what can
	// be served.
	if b, ok := s.tok.(interface{ MaxBytesPerToken() int }); ok && b.MaxBytesPerToken() > 0 {
		if least := (len(p.text) + b.MaxBytesPerToken() - 1) / b.MaxBytesPerToken(); least > s.opts.MaxPromptTokens {
			return nil, badRequest(promptArg, codeContextLength,
				"the prompt is %d bytes, at least %d tokens (a token stands for at most %d bytes); this server takes at most %d",
				len(p.text), least, b.MaxBytesPerToken(), s.opts.MaxPromptTokens)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, clientGone()
	}
	ids := s.tok.Encode(p.text, bos, false)
	if err := ctx.Err(); err != nil {
		return nil, clientGone()
	}
	if len(ids) > s.opts.MaxPromptTokens {
		return nil, badRequest(promptArg, codeContextLength, "the prompt is %d tokens; this server takes at most %d",
			len(ids), s.opts.MaxPromptTokens)
	}
	// A generation of n tokens after a prompt of P holds P+n-1 positions:
	// the last token is never fed back.
	room := s.info.MaxSeq - len(ids) + 1
	maxArg := p.maxTokensArg
	if maxArg == "" {
		maxArg = "max_tokens"
	}
	n := p.maxTokens
	switch {
	case n == 0 && p.chat:
		n = min(s.opts.MaxTokens, room)
	case n == 0:
		n = min(s.opts.DefaultCompletionTokens, room)
	case n > s.opts.MaxTokens:
		return nil, badRequest(maxArg, codeInvalidValue, "'%s' is %d; this server allows at most %d", maxArg, n, s.opts.MaxTokens)
	case n > room:
		return nil, badRequest(maxArg, codeContextLength,
			"this model's maximum context length is %d tokens: the prompt is %d tokens, so '%s' may be at most %d, not %d",
			s.info.MaxSeq, len(ids), maxArg, room, n)
	}
	if n < 1 {
		return nil, badRequest(promptArg, codeContextLength, "the prompt is %d tokens and leaves no room to generate in the model's %d positions",
			len(ids), s.info.MaxSeq)
	}
	temp := DefaultTemperature
	if p.tempSet {
		temp = p.temperature
	}
	seed := mrand.Uint64()
	if p.seedSet {
		seed = uint64(p.seed)
	}
	prompt := make([]int32, len(ids))
	for i, t := range ids {
		if t < 0 || t > math.MaxInt32 {
			return nil, badRequest(promptArg, codeInvalidValue, "the prompt encodes to a token %d the model cannot take", t)
		}
		prompt[i] = int32(t)
	}
	req := engine.Request{Prompt: prompt, MaxTokens: n,
		Sampling: engine.Sampling{Temperature: float32(temp), TopK: p.topK, TopP: float32(p.topP), Seed: seed}}
	if err := s.eng.Validate(req); err != nil {
		return nil, badRequest("", codeInvalidValue, "%s", strings.TrimPrefix(err.Error(), engine.ErrInvalidRequest.Error()+": "))
	}
	return &job{p: p, prompt: ids, req: req}, nil
}

// Response shapes (OpenAI's).

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type completionChoice struct {
	Text         string  `json:"text"`
	Index        int     `json:"index"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []completionChoice `json:"choices"`
	Usage             *usage             `json:"usage,omitempty"`
}

type chatMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     any         `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []chatChoice `json:"choices"`
	Usage             usage        `json:"usage"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatChunk struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	SystemFingerprint string            `json:"system_fingerprint"`
	Choices           []chatChunkChoice `json:"choices"`
	Usage             *usage            `json:"usage,omitempty"`
}

// handleGenerate answers POST /v1/completions (chat false) and POST
// /v1/chat/completions (chat true).
func (s *Server) handleGenerate(chat bool) http.HandlerFunc {
	endpoint := pathCompletions
	if chat {
		endpoint = pathChat
	}
	return func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		if s.draining.Load() {
			writeError(w, &apiError{status: http.StatusServiceUnavailable, typ: typeServer, code: "shutting_down",
				message: "the server is shutting down"})
			return
		}
		body, aerr := s.readBody(w, r)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		p, aerr := parseRequest(body, chat)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		j, aerr := s.prepare(r.Context(), p)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		rec := record(r.Context())
		submitted := time.Now()
		h, err := s.eng.Submit(r.Context(), j.req)
		if err != nil {
			writeError(w, s.submitError(err, rec.id))
			return
		}
		s.metrics.inFlight.Inc()
		defer s.metrics.inFlight.Dec()
		s.metrics.promptTokens.Add(float64(len(j.prompt)))
		rec.generated, rec.model, rec.promptTokens = true, s.opts.ModelName, len(j.prompt)
		g := &generation{s: s, w: w, ctx: r.Context(), h: h, j: j, chat: chat, endpoint: endpoint, arrived: arrived,
			submitted: submitted, created: time.Now().Unix(), rc: http.NewResponseController(w), rec: rec}
		// The completion's id ends with the request's, so a client's
		// X-Request-Id finds its response in the log and the other way round.
		if chat {
			g.id = "chatcmpl-" + rec.id
		} else {
			g.id = "cmpl-" + rec.id
		}
		g.run()
	}
}

// clientGone answers a request whose client left before it was submitted
// (no one reads the answer; the status is what the metrics count).
func clientGone() *apiError {
	return &apiError{status: 499, typ: typeInvalidRequest, code: "client_closed_request",
		message: "the client closed the connection before the request was submitted"}
}

func (s *Server) submitError(err error, id string) *apiError {
	switch {
	case errors.Is(err, engine.ErrQueueFull):
		secs := int((s.opts.RetryAfter + time.Second - 1) / time.Second)
		return &apiError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "queue_full", retryAfter: max(1, secs),
			message: "the server's request queue is full; retry later"}
	case errors.Is(err, engine.ErrClosed):
		return &apiError{status: http.StatusServiceUnavailable, typ: typeServer, code: "shutting_down",
			message: "the engine has stopped; the server is shutting down"}
	case errors.Is(err, engine.ErrInvalidRequest):
		return badRequest("", codeInvalidValue, "%s", strings.TrimPrefix(err.Error(), engine.ErrInvalidRequest.Error()+": "))
	}
	return internalError(s.log, id, "submitting the request", err)
}

// errAborted ends the generations Server.Abort cuts.
var errAborted = errors.New("serve: aborted by a forced shutdown")

// generation is one submitted request being answered.
type generation struct {
	s        *Server
	w        http.ResponseWriter
	rc       *http.ResponseController
	ctx      context.Context
	h        *engine.Handle
	j        *job
	chat     bool
	endpoint string
	id       string
	created  int64
	arrived  time.Time
	// submitted is when the request went to the engine (its queue time
	// starts there).
	submitted time.Time
	tokens    int
	rec       *reqRecord
	// first and last are when the first and the latest token arrived.
	first, last time.Time
}

// end records a finished generation in the request's log line.
func (g *generation) end(reason string) {
	g.rec.finish, g.rec.outputTokens = reason, g.tokens
	if a := g.h.Admitted(); !a.IsZero() {
		g.rec.queue = a.Sub(g.submitted)
	}
}

// run collects the engine's outputs and answers them, streamed or whole.
// It ends with exactly one final event: a response, or for a stream one
// chunk with finish_reason (then the usage chunk if asked) or one error
// event, then [DONE]. A client that leaves cancels the request.
func (g *generation) run() {
	p := g.j.p
	stop := newStopper(p.stop)
	if p.stream {
		hd := g.w.Header()
		hd.Set("Content-Type", "text/event-stream")
		hd.Set("Cache-Control", "no-cache")
		hd.Set("X-Accel-Buffering", "no")
		g.w.WriteHeader(http.StatusOK)
		if g.chat {
			if g.event(g.chatChunk(chatDelta{Role: "assistant", Content: ptr("")}, nil)) != nil {
				g.cancelled()
				return
			}
		} else {
			g.rc.Flush()
		}
	}
	prev := g.j.prompt[len(g.j.prompt)-1]
	reason := ""
	var genErr error
loop:
	for {
		select {
		case <-g.ctx.Done():
			g.cancelled()
			return
		case <-g.s.abort:
			g.s.cut.Add(1)
			reason, genErr = "error", errAborted
			break loop
		case o, ok := <-g.h.Outputs():
			if !ok {
				reason, genErr = "error", engine.ErrClosed
				break loop
			}
			if o.Done {
				reason, genErr = o.Reason, o.Err
				break loop
			}
			now := time.Now()
			if g.tokens == 0 {
				g.first = now
				g.rec.ttft = now.Sub(g.arrived)
				g.s.metrics.firstToken(g.endpoint, g.rec.ttft)
			} else {
				g.s.metrics.itl.Observe(now.Sub(g.last).Seconds())
			}
			g.last = now
			g.tokens++
			text, matched := stop.add(g.s.tok.SafePiece(prev, int(o.Token)))
			prev = int(o.Token)
			if p.stream && text != "" {
				if g.event(g.chunk(text, nil)) != nil {
					g.cancelled()
					return
				}
			}
			if matched {
				// The stop sequence ends the request: free its pages now.
				g.h.Cancel()
				reason = "stop"
				break loop
			}
		}
	}
	switch reason {
	case "stop", "length":
	case "cancelled":
		g.cancelled()
		return
	default:
		g.failed(genErr)
		return
	}
	g.s.metrics.completionTokens.Add(float64(g.tokens))
	g.s.metrics.finish(g.endpoint, reason, time.Since(g.arrived))
	g.s.metrics.phases(g.submitted, g.h.Admitted(), g.first, g.last, len(g.j.prompt), g.tokens)
	g.end(reason)
	u := usage{PromptTokens: len(g.j.prompt), CompletionTokens: g.tokens, TotalTokens: len(g.j.prompt) + g.tokens}
	if !p.stream {
		if g.chat {
			writeJSON(g.w, http.StatusOK, chatCompletion{ID: g.id, Object: "chat.completion", Created: g.created, Model: g.s.opts.ModelName, SystemFingerprint: g.s.fingerprint,
				Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: stop.result()}, FinishReason: reason}}, Usage: u})
		} else {
			writeJSON(g.w, http.StatusOK, completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.s.opts.ModelName, SystemFingerprint: g.s.fingerprint,
				Choices: []completionChoice{{Text: stop.result(), FinishReason: &reason}}, Usage: &u})
		}
		return
	}
	if rest := stop.flush(); rest != "" {
		if g.event(g.chunk(rest, nil)) != nil {
			return
		}
	}
	if g.event(g.chunk("", &reason)) != nil {
		return
	}
	if p.includeUsage {
		if g.chat {
			c := g.chatChunk(chatDelta{}, nil)
			c.Choices, c.Usage = []chatChunkChoice{}, &u
			if g.event(c) != nil {
				return
			}
		} else if g.event(completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.s.opts.ModelName, SystemFingerprint: g.s.fingerprint,
			Choices: []completionChoice{}, Usage: &u}) != nil {
			return
		}
	}
	g.done()
}

func ptr[T any](v T) *T { return &v }

// chunk is a streamed piece of text, or the final chunk when reason is set.
func (g *generation) chunk(text string, reason *string) any {
	if g.chat {
		d := chatDelta{}
		if reason == nil {
			d.Content = &text
		}
		return g.chatChunk(d, reason)
	}
	return completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.s.opts.ModelName, SystemFingerprint: g.s.fingerprint,
		Choices: []completionChoice{{Text: text, FinishReason: reason}}}
}

func (g *generation) chatChunk(d chatDelta, reason *string) chatChunk {
	return chatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.s.opts.ModelName, SystemFingerprint: g.s.fingerprint,
		Choices: []chatChunkChoice{{Delta: d, FinishReason: reason}}}
}

// event writes one server-sent event and flushes it.
func (g *generation) event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	g.s.writeDeadline(g.rc)
	if err := failpoint.Inject(failpoint.StreamEvent); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(g.w, "data: %s\n\n", b); err != nil {
		return err
	}
	return g.rc.Flush()
}

func (g *generation) done() {
	g.s.writeDeadline(g.rc)
	io.WriteString(g.w, "data: [DONE]\n\n")
	g.rc.Flush()
}

// cancelled ends a request whose client left: the engine frees its pages
// before its next step.
func (g *generation) cancelled() {
	g.h.Cancel()
	g.s.metrics.completionTokens.Add(float64(g.tokens))
	g.s.metrics.finish(g.endpoint, "cancelled", time.Since(g.arrived))
	g.end("cancelled")
}

// failed answers an engine error: an error body, or in a stream an error
// event and [DONE].
func (g *generation) failed(err error) {
	g.h.Cancel()
	g.s.metrics.finish(g.endpoint, "error", time.Since(g.arrived))
	g.end("error")
	var e *apiError
	if errors.Is(err, engine.ErrClosed) || errors.Is(err, errAborted) {
		e = &apiError{status: http.StatusServiceUnavailable, typ: typeServer, code: "shutting_down",
			message: "the server shut down before the request finished"}
	} else {
		e = internalError(g.s.log, g.rec.id, "generation", err)
	}
	if !g.j.p.stream {
		writeError(g.w, e)
		return
	}
	if g.event(e.body()) == nil {
		g.done()
	}
}
