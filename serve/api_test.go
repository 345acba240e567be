package serve_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/reprise-ml/reprise/serve"
)

var ctx = context.Background()

// Greedy completions equal the reference program's output, with usage
// counts and finish reasons.
func TestCompletionGreedyMatchesReference(t *testing.T) {
	v := sharedEnv(t)
	c := client(v.ts.URL)
	for _, tc := range []struct {
		prompt    string
		maxTokens int
	}{{"Once upon a time", 40}, {"Lily and Tom", 24}, {"", 8}, {"The dog", 1}} {
		want := v.reference(t, tc.prompt, tc.maxTokens)
		res, err := c.Completions.New(ctx, openai.CompletionNewParams{
			Model:       "stories260K",
			Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String(tc.prompt)},
			MaxTokens:   openai.Int(int64(tc.maxTokens)),
			Temperature: openai.Float(0),
		})
		if err != nil {
			t.Fatalf("%q: %v", tc.prompt, err)
		}
		if len(res.Choices) != 1 {
			t.Fatalf("%q: %d choices", tc.prompt, len(res.Choices))
		}
		ch := res.Choices[0]
		if ch.Text != want {
			t.Errorf("%q: text\n%q\nwant the reference's\n%q", tc.prompt, ch.Text, want)
		}
		promptTokens := len(v.tok.Encode(tc.prompt, true, false))
		u := res.Usage
		if u.PromptTokens != int64(promptTokens) || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Errorf("%q: usage %+v, want %d prompt tokens", tc.prompt, u, promptTokens)
		}
		switch ch.FinishReason {
		case "length":
			if u.CompletionTokens != int64(tc.maxTokens) {
				t.Errorf("%q: finished by length after %d tokens, max_tokens %d", tc.prompt, u.CompletionTokens, tc.maxTokens)
			}
		case "stop":
			if u.CompletionTokens >= int64(tc.maxTokens) {
				t.Errorf("%q: finished by stop after %d tokens, max_tokens %d", tc.prompt, u.CompletionTokens, tc.maxTokens)
			}
		default:
			t.Errorf("%q: finish_reason %q", tc.prompt, ch.FinishReason)
		}
		if res.Object != "text_completion" || res.Model != "stories260K" || !strings.HasPrefix(res.ID, "cmpl-") {
			t.Errorf("%q: object %q model %q id %q", tc.prompt, res.Object, res.Model, res.ID)
		}
	}
}

// The prompt may be an array of one string; the model may be left out.
func TestCompletionPromptArray(t *testing.T) {
	v := sharedEnv(t)
	code, _, body := post(t, v.ts.URL, "/v1/completions", `{"prompt":["Once upon a time"],"max_tokens":12,"temperature":0}`)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var res struct {
		Choices []struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if want := v.reference(t, "Once upon a time", 12); res.Choices[0].Text != want {
		t.Errorf("text %q, want %q", res.Choices[0].Text, want)
	}
}

// The chat template joins the messages' contents with "\n".
func TestChatGreedyMatchesReference(t *testing.T) {
	v := sharedEnv(t)
	c := client(v.ts.URL)
	res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "stories260K",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("Once upon a time"),
			openai.UserMessage("there was a cat."),
			openai.AssistantMessage("The cat"),
		},
		MaxCompletionTokens: openai.Int(30),
		Temperature:         openai.Float(0),
		User:                openai.String("someone"),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := v.reference(t, "Once upon a time\nthere was a cat.\nThe cat", 30)
	ch := res.Choices[0]
	if ch.Message.Content != want || ch.Message.Role != "assistant" {
		t.Errorf("message %q (%s), want %q", ch.Message.Content, ch.Message.Role, want)
	}
	if res.Object != "chat.completion" || !strings.HasPrefix(res.ID, "chatcmpl-") || res.Usage.TotalTokens != res.Usage.PromptTokens+res.Usage.CompletionTokens {
		t.Errorf("object %q id %q usage %+v", res.Object, res.ID, res.Usage)
	}
	// Without max_tokens a chat may use what the prompt leaves; greedy
	// stories end with the model's stop token well before.
	res, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Lily")},
		Temperature: openai.Float(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := v.reference(t, "Lily", 512); res.Choices[0].Message.Content != want {
		t.Errorf("unbounded chat: %q, want %q", res.Choices[0].Message.Content, want)
	}
}

// Streams join to the text of the same request answered whole, end with a
// finish reason, and carry usage when asked.
func TestStreaming(t *testing.T) {
	v := sharedEnv(t)
	c := client(v.ts.URL)
	want := v.reference(t, "One day", 48)

	s := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model:         "stories260K",
		Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String("One day")},
		MaxTokens:     openai.Int(48),
		Temperature:   openai.Float(0),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var finish string
	var usage *openai.CompletionUsage
	chunks := 0
	for s.Next() {
		ch := s.Current()
		if usage != nil {
			t.Fatal("a chunk after the usage chunk")
		}
		if len(ch.Choices) == 0 {
			u := ch.Usage
			usage = &u
			continue
		}
		if finish != "" {
			t.Fatal("a chunk after the finish reason")
		}
		chunks++
		text.WriteString(ch.Choices[0].Text)
		finish = string(ch.Choices[0].FinishReason)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != want || finish == "" || chunks < 2 {
		t.Errorf("stream %q (%d chunks, finish %q), want %q", text.String(), chunks, finish, want)
	}
	if usage == nil || usage.CompletionTokens == 0 || usage.PromptTokens != int64(len(v.tok.Encode("One day", true, false))) {
		t.Errorf("usage %+v", usage)
	}

	cs := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:       "stories260K",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("One day")},
		MaxTokens:   openai.Int(48),
		Temperature: openai.Float(0),
	})
	text.Reset()
	finish = ""
	role := ""
	for cs.Next() {
		ch := cs.Current()
		if len(ch.Choices) == 0 {
			t.Fatal("a usage chunk that was not asked for")
		}
		if ch.Object != "chat.completion.chunk" {
			t.Errorf("chunk object %q", ch.Object)
		}
		if ch.Choices[0].Delta.Role != "" {
			role = ch.Choices[0].Delta.Role
		}
		text.WriteString(ch.Choices[0].Delta.Content)
		if finish != "" {
			t.Fatal("a chunk after the finish reason")
		}
		finish = ch.Choices[0].FinishReason
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != want || finish == "" || role != "assistant" {
		t.Errorf("chat stream %q (role %q, finish %q), want %q", text.String(), role, finish, want)
	}

	// The raw stream: data lines, the last one [DONE].
	code, hdr, body := post(t, v.ts.URL, "/v1/completions", `{"prompt":"One day","max_tokens":4,"stream":true,"temperature":0}`)
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", code, hdr.Get("Content-Type"))
	}
	events := sseEvents(t, strings.NewReader(string(body)))
	if len(events) < 2 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	if !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Errorf("stream does not end with data: [DONE]: %q", body)
	}
}

// The same seed and parameters give the same text, streamed or not; other
// seeds give other texts.
func TestSeeds(t *testing.T) {
	v := sharedEnv(t)
	c := client(v.ts.URL)
	gen := func(seed int64) string {
		res, err := c.Completions.New(ctx, openai.CompletionNewParams{
			Model:       "stories260K",
			Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			MaxTokens:   openai.Int(40),
			Temperature: openai.Float(1),
			TopP:        openai.Float(0.95),
			Seed:        openai.Int(seed),
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.Choices[0].Text
	}
	a, b := gen(7), gen(7)
	if a != b {
		t.Errorf("seed 7 gave %q then %q", a, b)
	}
	s := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model:       "stories260K",
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens:   openai.Int(40),
		Temperature: openai.Float(1),
		TopP:        openai.Float(0.95),
		Seed:        openai.Int(7),
	})
	var streamed strings.Builder
	for s.Next() {
		if ch := s.Current(); len(ch.Choices) > 0 {
			streamed.WriteString(ch.Choices[0].Text)
		}
	}
	if err := s.Err(); err != nil || streamed.String() != a {
		t.Errorf("seed 7 streamed %q (%v), want %q", streamed.String(), err, a)
	}
	differ := false
	for _, seed := range []int64{8, 9, -1} {
		if gen(seed) != a {
			differ = true
		}
	}
	if !differ {
		t.Errorf("seeds 8, 9 and -1 all gave seed 7's text %q", a)
	}
	// top_k (an extension) 1 is greedy whatever the temperature.
	code, _, body := post(t, v.ts.URL, "/v1/completions", `{"prompt":"Once upon a time","max_tokens":20,"temperature":1.5,"top_k":1,"seed":3}`)
	var res struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	if json.Unmarshal(body, &res); code != http.StatusOK || len(res.Choices) != 1 || res.Choices[0].Text != v.reference(t, "Once upon a time", 20) {
		t.Errorf("top_k 1: status %d: %s", code, body)
	}
}

// Stop sequences end the text before their first match, whole or streamed.
func TestStopSequences(t *testing.T) {
	v := sharedEnv(t)
	c := client(v.ts.URL)
	full := v.reference(t, "Once upon a time", 60)
	// full is ", there was a little girl named Lily. She loved to play ..."
	for _, tc := range []struct {
		stop []string
		want string
	}{
		{[]string{"Lily"}, full[:strings.Index(full, "Lily")]},
		{[]string{"play", "girl"}, full[:strings.Index(full, "girl")]},
		{[]string{"e l"}, full[:strings.Index(full, "e l")]}, // across tokens
		{[]string{"not in the text"}, full},
	} {
		res, err := c.Completions.New(ctx, openai.CompletionNewParams{
			Model:       "stories260K",
			Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			MaxTokens:   openai.Int(60),
			Temperature: openai.Float(0),
			Stop:        openai.CompletionNewParamsStopUnion{OfStringArray: tc.stop},
		})
		if err != nil {
			t.Fatal(err)
		}
		ch := res.Choices[0]
		wantFinish := "stop"
		if tc.want == full {
			wantFinish = "length"
		}
		if ch.Text != tc.want || string(ch.FinishReason) != wantFinish {
			t.Errorf("stop %q: %q (%s), want %q (%s)", tc.stop, ch.Text, ch.FinishReason, tc.want, wantFinish)
		}
		if wantFinish == "stop" && res.Usage.CompletionTokens >= 60 {
			t.Errorf("stop %q: %d completion tokens", tc.stop, res.Usage.CompletionTokens)
		}
		cs := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:       "stories260K",
			Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")},
			MaxTokens:   openai.Int(60),
			Temperature: openai.Float(0),
			Stop:        openai.ChatCompletionNewParamsStopUnion{OfStringArray: tc.stop},
		})
		var text strings.Builder
		finish := ""
		for cs.Next() {
			if ch := cs.Current(); len(ch.Choices) > 0 {
				text.WriteString(ch.Choices[0].Delta.Content)
				if ch.Choices[0].FinishReason != "" {
					finish = ch.Choices[0].FinishReason
				}
			}
		}
		if err := cs.Err(); err != nil || text.String() != tc.want || finish != wantFinish {
			t.Errorf("stop %q streamed: %q (%s, %v), want %q", tc.stop, text.String(), finish, err, tc.want)
		}
	}
	// A single string.
	res, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model:       "stories260K",
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens:   openai.Int(60),
		Temperature: openai.Float(0),
		Stop:        openai.CompletionNewParamsStopUnion{OfString: openai.String(".")},
	})
	if err != nil || res.Choices[0].Text != full[:strings.Index(full, ".")] {
		t.Errorf("stop \".\": %v %+v", err, res)
	}
}

func TestModelsAndHealth(t *testing.T) {
	v := sharedEnv(t)
	c := client(v.ts.URL)
	page, err := c.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != "stories260K" || page.Data[0].OwnedBy != "reprise" {
		t.Errorf("models %+v", page.Data)
	}
	m, err := c.Models.Get(ctx, "stories260K")
	if err != nil || m.ID != "stories260K" {
		t.Errorf("model: %v %+v", err, m)
	}
	code, _, body := get(t, v.ts.URL, "/health")
	var h map[string]any
	if json.Unmarshal(body, &h); code != http.StatusOK || h["status"] != "ok" || h["graphs"] != true {
		t.Errorf("health %d: %s", code, body)
	}
}

// Drain makes /health say so and refuses new generations.
func TestDrain(t *testing.T) {
	v := sharedEnv(t)
	srv, err := serve.New(v.e, v.m.Info(), v.tok, serve.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	srv.Drain()
	code, _, body := get(t, ts.URL, "/health")
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "draining") {
		t.Errorf("health while draining: %d %s", code, body)
	}
	code, _, body = post(t, ts.URL, "/v1/completions", `{"prompt":"x"}`)
	if code != http.StatusServiceUnavailable {
		t.Errorf("completion while draining: %d %s", code, body)
	}
	decodeErr(t, body)
}
