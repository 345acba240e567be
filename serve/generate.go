package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// job is a checked request, ready for the engine: one engine request per
// choice.
type job struct {
	p      *genParams
	prompt []int
	// req is what every choice asks for, with the first choice's seed;
	// seeds are each choice's (the choices differ in nothing else).
	req   engine.Request
	seeds []uint64
	// echo is the prompt's text, for echo.
	echo string
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
	ids := p.promptIDs
	echo := p.text
	if ids == nil {
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
		// costs time in the text's length, a client's to spend only on what
		// can be served.
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
		ids = s.tok.Encode(p.text, bos, false)
		if err := ctx.Err(); err != nil {
			return nil, clientGone()
		}
	} else {
		echo = s.decode(ids)
	}
	if len(ids) > s.opts.MaxPromptTokens {
		return nil, badRequest(promptArg, codeContextLength, "the prompt is %d tokens; this server takes at most %d",
			len(ids), s.opts.MaxPromptTokens)
	}
	for i, t := range ids {
		if t >= s.info.Vocab {
			return nil, badRequest(promptArg, codeInvalidValue, "prompt token %d (at %d) is outside the model's vocabulary of %d", t, i, s.info.Vocab)
		}
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
	prompt := make([]int32, len(ids))
	for i, t := range ids {
		prompt[i] = int32(t)
	}
	var stops []int32
	for i, t := range p.stopTokens {
		if t >= s.info.Vocab {
			return nil, badRequest("stop_token_ids", codeInvalidValue, "'stop_token_ids[%d]' is %d, outside the model's vocabulary of %d", i, t, s.info.Vocab)
		}
		stops = append(stops, int32(t))
	}
	if err := s.checkPenalties(p, n); err != nil {
		return nil, err
	}
	choices := max(p.n, p.bestOf, 1)
	// Choice i of a seeded request uses seed+i: it equals the same request
	// with n=1 and that seed.
	seeds := make([]uint64, choices)
	for i := range seeds {
		seeds[i] = mrand.Uint64()
		if p.seedSet {
			seeds[i] = uint64(p.seed) + uint64(i)
		}
	}
	req := engine.Request{Prompt: prompt, MaxTokens: n, StopTokens: stops, IgnoreEOS: p.ignoreEOS,
		LogProbs: p.logprobs || choices > max(p.n, 1), TopLogProbs: p.topLogprobs, Penalties: p.pen,
		Sampling: engine.Sampling{Temperature: float32(temp), TopK: p.topK, TopP: float32(p.topP), Seed: seeds[0]}}
	// Validated once: the choices differ only in the seed, which
	// Validate does not look at.
	if err := s.eng.Validate(req); err != nil {
		return nil, badRequest("", codeInvalidValue, "%s", strings.TrimPrefix(err.Error(), engine.ErrInvalidRequest.Error()+": "))
	}
	return &job{p: p, prompt: ids, req: req, seeds: seeds, echo: echo}, nil
}

// decode is the text of tokens as the reference program prints them,
// each piece after the token before it (the first after BOS).
// A leading BOS prints nothing (the reference program never prints it).
func (s *Server) decode(ids []int) string {
	var b strings.Builder
	bos := s.bos()
	prev := bos
	for i, t := range ids {
		if i == 0 && t == bos {
			continue
		}
		b.Write(s.tok.SafePiece(prev, t))
		prev = t
	}
	return b.String()
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
		g := &generation{s: s, w: w, ctx: r.Context(), j: j, chat: chat, endpoint: endpoint, arrived: arrived,
			submitted: submitted, created: time.Now().Unix(), rc: http.NewResponseController(w), rec: rec}
		// The choices share one prefill of the prompt.
		hs, err := s.eng.SubmitChoices(r.Context(), j.req, j.seeds)
		if err != nil {
			writeError(w, s.submitError(err, rec.id))
			return
		}
		for i, h := range hs {
			g.choices = append(g.choices, &choice{index: i, h: h, stop: newStopper(p.stop), prev: j.prompt[len(j.prompt)-1]})
		}
		s.metrics.inFlight.Inc()
		defer s.metrics.inFlight.Dec()
		s.metrics.promptTokens.Add(float64(len(j.prompt)))
		rec.generated, rec.model, rec.promptTokens = true, s.opts.ModelName, len(j.prompt)
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

// generation is one submitted request being answered: its choices, each
// an engine request.
type generation struct {
	s        *Server
	w        http.ResponseWriter
	rc       *http.ResponseController
	ctx      context.Context
	j        *job
	chat     bool
	endpoint string
	id       string
	created  int64
	arrived  time.Time
	// submitted is when the request went to the engine (its queue time
	// starts there).
	submitted time.Time
	rec       *reqRecord
	choices   []*choice
}

// choice is one of a generation's choices.
type choice struct {
	index  int
	h      *engine.Handle
	stop   *stopper
	prev   int // the last token, whose piece the next one follows
	tokens int
	reason string
	err    error
	done   bool
	// first and last are when the first and the latest token arrived.
	first, last time.Time
	// lp are the choice's tokens' log probabilities (when asked); sent is
	// how many a stream has sent.
	lp   []tokenLP
	sent int
	// cum is the sum of the tokens' log probabilities (best_of's rank).
	cum float64
}

// output is a choice's engine output, fanned in.
type output struct {
	c *choice
	o engine.Output
}

func (g *generation) tokens() int {
	n := 0
	for _, c := range g.choices {
		n += c.tokens
	}
	return n
}

// end records a finished generation in the request's log line: its
// reason is the first choice's (or the first failure's).
func (g *generation) end(reason string) {
	g.rec.finish, g.rec.outputTokens = reason, g.tokens()
	var queue time.Duration
	for _, c := range g.choices {
		if a := c.h.Admitted(); !a.IsZero() {
			queue = max(queue, a.Sub(g.submitted))
		}
	}
	g.rec.queue = queue
}

func (g *generation) cancelAll() {
	for _, c := range g.choices {
		c.h.Cancel()
	}
}

// run collects the engine's outputs of every choice and answers them,
// streamed or whole. It ends with exactly one final event: a response, or
// for a stream one chunk with finish_reason per choice (then the usage
// chunk if asked) or one error event, then [DONE]. A client that leaves
// cancels the request.
func (g *generation) run() {
	p := g.j.p
	if p.stream {
		hd := g.w.Header()
		hd.Set("Content-Type", "text/event-stream")
		hd.Set("Cache-Control", "no-cache")
		hd.Set("X-Accel-Buffering", "no")
		g.w.WriteHeader(http.StatusOK)
		for _, c := range g.choices {
			var err error
			switch {
			case g.chat:
				err = g.event(g.chatChunk(c.index, chatDelta{Role: "assistant", Content: ptr("")}, nil))
			case p.echo:
				err = g.event(g.chunk(c.index, g.j.echo, nil))
			}
			if err != nil {
				g.cancelled()
				return
			}
		}
		if !g.chat && !p.echo {
			g.rc.Flush()
		}
	}
	// Fan the choices' outputs in; each channel is buffered for its whole
	// request, so a forwarder left behind never holds the engine up.
	outs := make(chan output)
	quit := make(chan struct{})
	defer close(quit)
	for _, c := range g.choices {
		go func() {
			for o := range c.h.Outputs() {
				select {
				case outs <- output{c, o}:
				case <-quit:
					return
				}
			}
			select {
			case outs <- output{c, engine.Output{Done: true, Reason: "error", Err: engine.ErrClosed}}:
			case <-quit:
			}
		}()
	}
	left := len(g.choices)
	var failure error
	failed := false
	for left > 0 {
		var ev output
		select {
		case <-g.ctx.Done():
			g.cancelled()
			return
		case <-g.s.abort:
			g.s.cut.Add(1)
			failure, failed = errAborted, true
			left = 0
			continue
		case ev = <-outs:
		}
		c, o := ev.c, ev.o
		if c.done {
			continue
		}
		if o.Done {
			c.done, c.reason = true, o.Reason
			left--
			switch o.Reason {
			case "stop", "length":
				g.s.metrics.phases(g.submitted, c.h.Admitted(), c.first, c.last, len(g.j.prompt), c.tokens)
				if err := g.finishChoice(c); err != nil {
					g.cancelled()
					return
				}
			case "cancelled":
				g.cancelled()
				return
			default:
				failure, failed = o.Err, true
				left = 0
			}
			continue
		}
		now := time.Now()
		if c.tokens == 0 {
			c.first = now
			if g.rec.ttft == 0 {
				g.rec.ttft = now.Sub(g.arrived)
				g.s.metrics.firstToken(g.endpoint, g.rec.ttft)
			}
		} else {
			g.s.metrics.itl.Observe(now.Sub(c.last).Seconds())
		}
		c.last = now
		c.tokens++
		if o.HasLogProb {
			c.lp = append(c.lp, g.tokenLP(c.prev, o))
			c.cum += float64(o.LogProb)
		}
		text, matched := c.stop.add(g.s.tok.SafePiece(c.prev, int(o.Token)))
		c.prev = int(o.Token)
		if p.stream && text != "" {
			if g.event(g.chunkLP(c, text, nil)) != nil {
				g.cancelled()
				return
			}
		}
		if matched {
			// The stop sequence ends the choice: free its pages now.
			c.h.Cancel()
			c.done, c.reason = true, "stop"
			left--
			g.s.metrics.phases(g.submitted, c.h.Admitted(), c.first, c.last, len(g.j.prompt), c.tokens)
			if err := g.finishChoice(c); err != nil {
				g.cancelled()
				return
			}
		}
	}
	if failed {
		g.failed(failure)
		return
	}
	g.s.metrics.completionTokens.Add(float64(g.tokens()))
	g.choices = g.best(max(p.n, 1))
	reason := g.choices[0].reason
	g.s.metrics.finish(g.endpoint, reason, time.Since(g.arrived))
	g.end(reason)
	u := usage{PromptTokens: len(g.j.prompt), CompletionTokens: g.tokens(), TotalTokens: len(g.j.prompt) + g.tokens()}
	if !p.stream {
		if g.chat {
			res := chatCompletion{ID: g.id, Object: "chat.completion", Created: g.created, Model: g.s.opts.ModelName,
				SystemFingerprint: g.s.fingerprint, Usage: u}
			for _, c := range g.choices {
				res.Choices = append(res.Choices, chatChoice{Index: c.index, Message: chatMessage{Role: "assistant", Content: c.stop.result()},
					Logprobs: g.logprobsOf(c.lp, 0), FinishReason: c.reason})
			}
			writeJSON(g.w, http.StatusOK, res)
		} else {
			res := completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.s.opts.ModelName,
				SystemFingerprint: g.s.fingerprint, Usage: &u}
			for _, c := range g.choices {
				text := c.stop.result()
				if p.echo {
					text = g.j.echo + text
				}
				off := 0
				if p.echo {
					off = len(g.j.echo)
				}
				res.Choices = append(res.Choices, completionChoice{Text: text, Index: c.index, Logprobs: g.logprobsOf(c.lp, off),
					FinishReason: ptr(c.reason)})
			}
			writeJSON(g.w, http.StatusOK, res)
		}
		return
	}
	if p.includeUsage {
		if g.chat {
			c := g.chatChunk(0, chatDelta{}, nil)
			c.Choices, c.Usage = []chatChunkChoice{}, &u
			if g.event(c) != nil {
				return
			}
		} else if g.event(completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.s.opts.ModelName,
			SystemFingerprint: g.s.fingerprint, Choices: []completionChoice{}, Usage: &u}) != nil {
			return
		}
	}
	g.done()
}

// finishChoice streams a finished choice's held-back text and its final
// chunk (nothing for a whole answer).
func (g *generation) finishChoice(c *choice) error {
	if !g.j.p.stream {
		return nil
	}
	if rest := c.stop.flush(); rest != "" {
		if err := g.event(g.chunkLP(c, rest, nil)); err != nil {
			return err
		}
	}
	return g.event(g.chunkLP(c, "", &c.reason))
}

func ptr[T any](v T) *T { return &v }

// chunk is a streamed piece of a choice's text, or its final chunk when
// reason is set.
func (g *generation) chunk(index int, text string, reason *string) any {
	if g.chat {
		d := chatDelta{}
		if reason == nil {
			d.Content = &text
		}
		return g.chatChunk(index, d, reason)
	}
	return completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.s.opts.ModelName, SystemFingerprint: g.s.fingerprint,
		Choices: []completionChoice{{Text: text, Index: index, FinishReason: reason}}}
}

func (g *generation) chatChunk(index int, d chatDelta, reason *string) chatChunk {
	return chatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.s.opts.ModelName, SystemFingerprint: g.s.fingerprint,
		Choices: []chatChunkChoice{{Index: index, Delta: d, FinishReason: reason}}}
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
	g.cancelAll()
	g.s.metrics.completionTokens.Add(float64(g.tokens()))
	g.s.metrics.finish(g.endpoint, "cancelled", time.Since(g.arrived))
	g.end("cancelled")
}

// failed answers an engine error: an error body, or in a stream an error
// event and [DONE].
func (g *generation) failed(err error) {
	g.cancelAll()
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
