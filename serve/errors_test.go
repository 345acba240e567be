package serve_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/serve"
)

// Every kind of bad request gets its status and an OpenAI error body that
// names the parameter at fault and says what is wrong.
func TestBadRequests(t *testing.T) {
	v := sharedEnv(t)
	long := strings.Repeat("Once upon a time there was a girl. ", 80) // > 512 tokens
	for _, tc := range []struct {
		name, path, body string
		status           int
		param            string // "" expects null
		msg              string // a substring of the message
	}{
		{"not JSON", "/v1/completions", `{"prompt": "x"`, 400, "", "could not parse the JSON body"},
		{"not an object", "/v1/completions", `["x"]`, 400, "", "the request body must be a JSON object, not an array"},
		{"an array of a number", "/v1/completions", `[1]`, 400, "", "the request body must be a JSON object, not an array"},
		{"a string body", "/v1/completions", `"prompt"`, 400, "", "the request body must be a JSON object, not a string"},
		{"duplicate key", "/v1/completions", `{"prompt":"x","max_tokens":2,"max_tokens":300}`, 400, "max_tokens", "gives 'max_tokens' more than once"},
		{"duplicate nested key", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"},{"role":"user","role":"system","content":"b"}]}`, 400, "messages[1].role", "more than once"},
		{"null body", "/v1/completions", `null`, 400, "", "must be a JSON object"},
		{"trailing data", "/v1/completions", `{"prompt":"x"} {}`, 400, "", "data after the JSON object"},
		{"empty body", "/v1/completions", ``, 400, "", "could not parse"},
		{"no prompt", "/v1/completions", `{"model":"stories260K"}`, 400, "prompt", "you must provide a 'prompt' parameter"},
		{"null prompt", "/v1/completions", `{"prompt":null}`, 400, "prompt", "you must provide a 'prompt'"},
		{"no messages", "/v1/chat/completions", `{"model":"stories260K"}`, 400, "messages", "you must provide a 'messages' parameter"},
		{"unknown parameter", "/v1/completions", `{"prompt":"x","foo":1}`, 400, "foo", "unrecognized request argument supplied: foo"},
		{"chat parameter on completions", "/v1/completions", `{"prompt":"x","messages":[]}`, 400, "messages", "unrecognized"},
		{"prompt parameter on chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"prompt":"x"}`, 400, "prompt", "unrecognized"},
		{"prompt a number", "/v1/completions", `{"prompt":3}`, 400, "prompt", "must be a string, an array of one string, or an array of tokens, not a number"},
		{"two prompts", "/v1/completions", `{"prompt":["a","b"]}`, 400, "prompt", "one prompt per request"},
		{"two token prompts", "/v1/completions", `{"prompt":[[1,2],[3]]}`, 400, "prompt", "one prompt per request"},
		{"empty token prompt", "/v1/completions", `{"prompt":[[]]}`, 400, "prompt[0]", "holds no tokens"},
		{"token a fraction", "/v1/completions", `{"prompt":[1,2.5]}`, 400, "prompt[1]", "must be an integer"},
		{"token negative", "/v1/completions", `{"prompt":[1,-2]}`, 400, "prompt", "not a token"},
		{"token outside the vocabulary", "/v1/completions", `{"prompt":[1,512]}`, 400, "prompt", "outside the model's vocabulary of 512"},
		{"stop token outside the vocabulary", "/v1/completions", `{"prompt":"x","stop_token_ids":[3,600]}`, 400, "stop_token_ids", "outside the model's vocabulary"},
		{"stop_token_ids a number", "/v1/completions", `{"prompt":"x","stop_token_ids":3}`, 400, "stop_token_ids", "an array of token ids"},
		{"ignore_eos a number", "/v1/completions", `{"prompt":"x","ignore_eos":1}`, 400, "ignore_eos", "must be a boolean"},
		{"max tokens disagree on completions", "/v1/completions", `{"prompt":"x","max_tokens":3,"max_completion_tokens":4}`, 400, "max_completion_tokens", "disagree"},
		{"max_tokens a string", "/v1/completions", `{"prompt":"x","max_tokens":"5"}`, 400, "max_tokens", "must be an integer, not a string"},
		{"max_tokens a fraction", "/v1/completions", `{"prompt":"x","max_tokens":1.5}`, 400, "max_tokens", "must be an integer"},
		{"max_tokens 0", "/v1/completions", `{"prompt":"x","max_tokens":0}`, 400, "max_tokens", "must be at least 1"},
		{"max_tokens over the context", "/v1/completions", `{"prompt":"Once upon a time","max_tokens":510}`, 400, "max_tokens", "maximum context length is 512 tokens"},
		{"max_completion_tokens over the context", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Once upon a time"}],"max_completion_tokens":100000}`, 400, "max_completion_tokens", "at most 512"},
		{"max tokens disagree", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":3,"max_completion_tokens":4}`, 400, "max_completion_tokens", "disagree"},
		{"temperature too high", "/v1/completions", `{"prompt":"x","temperature":2.5}`, 400, "temperature", "between 0 and 2"},
		{"temperature negative", "/v1/completions", `{"prompt":"x","temperature":-1}`, 400, "temperature", "between 0 and 2"},
		{"temperature a string", "/v1/completions", `{"prompt":"x","temperature":"hot"}`, 400, "temperature", "must be a number"},
		{"top_p 0", "/v1/completions", `{"prompt":"x","top_p":0}`, 400, "top_p", "greater than 0"},
		{"top_p above 1", "/v1/completions", `{"prompt":"x","top_p":1.5}`, 400, "top_p", "at most 1"},
		{"top_k negative", "/v1/completions", `{"prompt":"x","top_k":-2}`, 400, "top_k", "0 (off) or a positive integer"},
		{"seed a fraction", "/v1/completions", `{"prompt":"x","seed":0.5}`, 400, "seed", "must be an integer"},
		{"seed too big", "/v1/completions", `{"prompt":"x","seed":99999999999999999999}`, 400, "seed", "must be an integer"},
		{"stop a number", "/v1/completions", `{"prompt":"x","stop":5}`, 400, "stop", "a string or an array of strings"},
		{"five stops", "/v1/completions", `{"prompt":"x","stop":["a","b","c","d","e"]}`, 400, "stop", "at most 4"},
		{"empty stop", "/v1/completions", `{"prompt":"x","stop":[""]}`, 400, "stop", "is empty"},
		{"stop not a string", "/v1/completions", `{"prompt":"x","stop":["a",1]}`, 400, "stop[1]", "must be a string"},
		{"stream a string", "/v1/completions", `{"prompt":"x","stream":"yes"}`, 400, "stream", "must be a boolean"},
		{"stream_options without stream", "/v1/completions", `{"prompt":"x","stream_options":{"include_usage":true}}`, 400, "stream_options", "only allowed when 'stream' is true"},
		{"stream_options unknown", "/v1/completions", `{"prompt":"x","stream":true,"stream_options":{"foo":true}}`, 400, "stream_options.foo", "unrecognized"},
		{"n 0", "/v1/completions", `{"prompt":"x","n":0}`, 400, "n", "between 1 and 16"},
		{"n 17", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"n":17}`, 400, "n", "between 1 and 16"},
		{"best_of below n", "/v1/completions", `{"prompt":"x","n":3,"best_of":2}`, 400, "best_of", "at least 'n' (3)"},
		{"best_of streamed", "/v1/completions", `{"prompt":"x","n":2,"best_of":3,"stream":true}`, 400, "best_of", "cannot be streamed"},
		{"echo a string", "/v1/completions", `{"prompt":"x","echo":"yes"}`, 400, "echo", "must be a boolean"},
		{"suffix", "/v1/completions", `{"prompt":"x","suffix":"end"}`, 400, "suffix", "not supported"},
		{"completion logprobs 21", "/v1/completions", `{"prompt":"x","logprobs":21}`, 400, "logprobs", "between 0 and 20"},
		{"chat logprobs a number", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":2}`, 400, "logprobs", "must be a boolean"},
		{"top_logprobs without logprobs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}`, 400, "top_logprobs", "needs 'logprobs'"},
		{"top_logprobs 21", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}`, 400, "top_logprobs", "between 0 and 20"},
		{"presence_penalty 2.5", "/v1/completions", `{"prompt":"x","presence_penalty":2.5}`, 400, "presence_penalty", "between -2 and 2"},
		{"frequency_penalty -3", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"frequency_penalty":-3}`, 400, "frequency_penalty", "between -2 and 2"},
		{"repetition_penalty 0", "/v1/completions", `{"prompt":"x","repetition_penalty":0}`, 400, "repetition_penalty", "greater than 0"},
		{"repetition_penalty a string", "/v1/completions", `{"prompt":"x","repetition_penalty":"1.2"}`, 400, "repetition_penalty", "must be a number"},
		{"logit_bias a word", "/v1/completions", `{"prompt":"x","logit_bias":{"the":10}}`, 400, "logit_bias.the", "not a token id"},
		{"logit_bias 101", "/v1/completions", `{"prompt":"x","logit_bias":{"50":101}}`, 400, "logit_bias.50", "between -100 and 100"},
		{"logit_bias an array", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logit_bias":[1]}`, 400, "logit_bias", "must be an object"},
		{"logit_bias outside", "/v1/completions", `{"prompt":"x","logit_bias":{"100000":1}}`, 400, "logit_bias", "outside the model's vocabulary"},
		{"min_p 1.5", "/v1/completions", `{"prompt":"x","min_p":1.5}`, 400, "min_p", "between 0 and 1"},
		{"min_tokens -1", "/v1/completions", `{"prompt":"x","min_tokens":-1}`, 400, "min_tokens", "positive integer"},
		{"min_tokens above max_tokens", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":3,"min_tokens":4}`, 400, "min_tokens", "more than the 3"},
		{"tools", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}`, 400, "tools", "no tools"},
		{"tool_choice required", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, 400, "tool_choice", "no tools"},
		{"response_format json", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`, 400, "response_format", "only {\"type\": \"text\"}"},
		{"modalities audio", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"modalities":["text","audio"]}`, 400, "modalities", "not supported"},
		{"reasoning_effort", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"high"}`, 400, "reasoning_effort", "does not reason"},
		{"messages empty", "/v1/chat/completions", `{"messages":[]}`, 400, "messages", "at least one message"},
		{"messages an object", "/v1/chat/completions", `{"messages":{"role":"user"}}`, 400, "messages", "must be an array of messages"},
		{"message a string", "/v1/chat/completions", `{"messages":["hi"]}`, 400, "messages[0]", "must be an object"},
		{"message without role", "/v1/chat/completions", `{"messages":[{"content":"x"}]}`, 400, "messages[0].role", "missing"},
		{"tool role", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"},{"role":"tool","content":"y","tool_call_id":"1"}]}`, 400, "messages[1].role", "\"tool\""},
		{"message without content", "/v1/chat/completions", `{"messages":[{"role":"user"}]}`, 400, "messages[0].content", "missing"},
		{"content a number", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, 400, "messages[0].content", "a string or an array of text parts"},
		{"image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content[0].type", "\"image_url\""},
		{"unknown message field", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x","foo":1}]}`, 400, "messages[0].foo", "unrecognized"},
		{"assistant tool calls", "/v1/chat/completions", `{"messages":[{"role":"assistant","content":"x","tool_calls":[{"id":"1"}]}]}`, 400, "messages[0].tool_calls", "no tools"},
		{"user a number", "/v1/completions", `{"prompt":"x","user":5}`, 400, "user", "must be a string"},
		{"model a number", "/v1/completions", `{"prompt":"x","model":5}`, 400, "model", "must be a string"},
		{"unknown model", "/v1/completions", `{"prompt":"x","model":"gpt-4"}`, 404, "model", "the model \"gpt-4\" does not exist"},
		{"unknown chat model", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"model":"gpt-4"}`, 404, "model", "does not exist"},
		{"prompt longer than the model", "/v1/completions", `{"prompt":"` + long + `","max_tokens":1}`, 400, "prompt", "this server takes at most 512"},
	} {
		code, _, body := post(t, v.ts.URL, tc.path, tc.body)
		if code != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, code, tc.status, body)
			continue
		}
		e := decodeErr(t, body).Error
		param := ""
		if e.Param != nil {
			param = *e.Param
		}
		if param != tc.param || !strings.Contains(e.Message, tc.msg) || (code == 400 && e.Type != "invalid_request_error") {
			t.Errorf("%s: param %q type %q message %q; want param %q and a message with %q", tc.name, param, e.Type, e.Message, tc.param, tc.msg)
		}
	}

	// Null parameters are left out; harmless ones are accepted.
	code, _, body := post(t, v.ts.URL, "/v1/chat/completions", `{"model":"stories260K","messages":[
		{"role":"system","content":"Once upon a time"},{"role":"developer","content":[{"type":"text","text":"there"}]},
		{"role":"user","content":"was","name":"x"},{"role":"assistant","content":"a cat","refusal":null,"tool_calls":[]}],
		"max_tokens":null,"temperature":0,"top_p":null,"n":1,"presence_penalty":0,"frequency_penalty":0,"logit_bias":{},
		"logprobs":false,"top_logprobs":0,"tools":[],"tool_choice":"none","response_format":{"type":"text"},"modalities":["text"],
		"user":"u","metadata":{"k":"v"},"store":false,"service_tier":"auto","parallel_tool_calls":true,"stop":null,
		"stream":false,"seed":null,"max_completion_tokens":5}`)
	if code != http.StatusOK {
		t.Errorf("harmless parameters: status %d: %s", code, body)
	}
	code, _, body = post(t, v.ts.URL, "/v1/completions", `{"prompt":"x","n":1,"best_of":1,"echo":false,"suffix":"","logprobs":null,"max_tokens":2,"user":"u"}`)
	if code != http.StatusOK {
		t.Errorf("harmless completion parameters: status %d: %s", code, body)
	}

	// The official client sees the error's fields.
	c := client(v.ts.URL)
	_, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model:  "stories260K",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")},
		N:      openai.Int(20),
	})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "n" || ae.Type != "invalid_request_error" || !strings.Contains(ae.Message, "between 1 and 16") {
		t.Errorf("n=20 through the client: %v", err)
	}
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:            "stories260K",
		Messages:         []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
		PresencePenalty:  openai.Float(3),
		FrequencyPenalty: openai.Float(0),
	})
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "presence_penalty" {
		t.Errorf("presence_penalty through the client: %v", err)
	}
}

// Limits: body size (413), prompt tokens, the max_tokens cap.
func TestLimits(t *testing.T) {
	ts := withServer(t, serve.Options{MaxBodyBytes: 200, MaxPromptTokens: 8, MaxTokens: 20})
	code, _, body := post(t, ts.URL, "/v1/completions", `{"prompt":"`+strings.Repeat("a", 300)+`"}`)
	if e := decodeErr(t, body); code != http.StatusRequestEntityTooLarge || !strings.Contains(e.Error.Message, "200 bytes") {
		t.Errorf("big body: %d %s", code, body)
	}
	code, _, body = post(t, ts.URL, "/v1/completions", `{"prompt":"Once upon a time there was a girl named Lily"}`)
	if e := decodeErr(t, body); code != 400 || *e.Error.Param != "prompt" || !strings.Contains(e.Error.Message, "at most 8") {
		t.Errorf("long prompt: %d %s", code, body)
	}
	code, _, body = post(t, ts.URL, "/v1/completions", `{"prompt":"Lily","max_tokens":21}`)
	if e := decodeErr(t, body); code != 400 || *e.Error.Param != "max_tokens" || !strings.Contains(e.Error.Message, "at most 20") {
		t.Errorf("max_tokens over the cap: %d %s", code, body)
	}
	// A chat that does not say stays within the cap.
	code, _, body = post(t, ts.URL, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Lily"}],"temperature":0,"stream_options":null}`)
	if code != 200 || !strings.Contains(string(body), `"completion_tokens":20`) {
		t.Errorf("chat under the cap: %d %s", code, body)
	}
}

// With an API key, /v1/* needs it; /health and /metrics stay open.
func TestAPIKey(t *testing.T) {
	ts := withServer(t, serve.Options{APIKey: "sekrit"})
	for _, tc := range []struct {
		method, path string
		header       []string
		status       int
	}{
		{"POST", "/v1/completions", nil, 401},
		{"POST", "/v1/completions", []string{"Authorization", "Bearer wrong"}, 401},
		{"POST", "/v1/completions", []string{"Authorization", "sekrit"}, 401},
		{"GET", "/v1/models", nil, 401},
		{"GET", "/v1/nothing", nil, 401},
		{"GET", "/v1/models", []string{"Authorization", "Bearer sekrit"}, 200},
		{"GET", "/health", nil, 200},
		{"GET", "/metrics", nil, 200},
	} {
		var code int
		var body []byte
		if tc.method == "POST" {
			code, _, body = post(t, ts.URL, tc.path, `{"prompt":"x","max_tokens":1}`, tc.header...)
		} else {
			code, _, body = get(t, ts.URL, tc.path, tc.header...)
		}
		if code != tc.status {
			t.Errorf("%s %s %q: status %d, want %d: %s", tc.method, tc.path, tc.header, code, tc.status, body)
		}
		if code == 401 {
			if e := decodeErr(t, body); *e.Error.Code != "invalid_api_key" {
				t.Errorf("401 code %v", e.Error.Code)
			}
		}
	}
	c := client(ts.URL)
	_, err := c.Models.List(ctx)
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 401 {
		t.Errorf("wrong key through the client: %v", err)
	}
	c = client(ts.URL, option.WithAPIKey("sekrit"))
	res, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model:     "stories260K",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")},
		MaxTokens: openai.Int(3),
	})
	if err != nil || len(res.Choices) != 1 {
		t.Errorf("right key through the client: %v", err)
	}
}

func TestNotFoundAndMethods(t *testing.T) {
	v := sharedEnv(t)
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/v1/completions", 405, "POST"},
		{"PUT", "/v1/chat/completions", 405, "POST"},
		{"POST", "/v1/models", 405, "GET, HEAD"},
		{"DELETE", "/health", 405, "GET, HEAD"},
		{"GET", "/v1/embeddings", 404, ""},
		{"GET", "/", 404, ""},
		{"GET", "/v1/models/gpt-4", 404, ""},
	} {
		req, _ := http.NewRequest(tc.method, v.ts.URL+tc.path, nil)
		code, hdr, body := do(t, req)
		if code != tc.status || hdr.Get("Allow") != tc.allow {
			t.Errorf("%s %s: status %d allow %q, want %d %q", tc.method, tc.path, code, hdr.Get("Allow"), tc.status, tc.allow)
		}
		decodeErr(t, body)
	}
}

// When the engine's queue is full the server answers 429 with Retry-After.
// The engine here is never started, so what is submitted stays queued. Its
// KV cache is small, so engine.Validate refuses what the server's own
// limits let through.
func TestQueueFullAndEngineLimits(t *testing.T) {
	v, err := newEnv(engine.Options{MaxQueue: 1, KVPages: 5}, serve.Options{RetryAfter: 1500 * time.Millisecond}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer v.close()
	code, _, body := post(t, v.ts.URL, "/v1/completions", `{"prompt":"x","max_tokens":100}`)
	if e := decodeErr(t, body); code != 400 || e.Error.Param != nil || !strings.Contains(e.Error.Message, "do not fit the KV cache") {
		t.Errorf("past the KV cache: %d %s", code, body)
	}
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(cctx, "POST", v.ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"x"}`))
		_, err := http.DefaultClient.Do(req)
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for v.e.Stats().Waiting != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first request never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	code, hdr, body := post(t, v.ts.URL, "/v1/completions", `{"prompt":"x"}`)
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "2" {
		t.Errorf("status %d, Retry-After %q: %s", code, hdr.Get("Retry-After"), body)
	}
	if e := decodeErr(t, body); *e.Error.Code != "queue_full" {
		t.Errorf("code %v", *e.Error.Code)
	}
	// The client gives up: its request leaves the queue.
	cancel()
	if err := <-done; err == nil {
		t.Error("the cancelled request succeeded")
	}
}
