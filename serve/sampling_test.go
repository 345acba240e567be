package serve_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/reprise-ml/reprise/engine"
)

// completionResult is the part of a completion these tests read.
type completionResult struct {
	ID      string `json:"id"`
	Choices []struct {
		Text         string `json:"text"`
		Index        int    `json:"index"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func complete(t *testing.T, url, body string) completionResult {
	t.Helper()
	code, _, b := post(t, url, "/v1/completions", body)
	if code != http.StatusOK {
		t.Fatalf("%s: status %d: %s", body, code, b)
	}
	var res completionResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// greedy is the engine's greedy continuation of a prompt, as tokens.
func (v *env) greedy(t *testing.T, prompt string, maxTokens int) ([]int32, string) {
	t.Helper()
	ids := v.tok.Encode(prompt, true, false)
	pr := make([]int32, len(ids))
	for i, x := range ids {
		pr[i] = int32(x)
	}
	toks, reason, err := v.e.Generate(ctx, engine.Request{Prompt: pr, MaxTokens: maxTokens})
	if err != nil {
		t.Fatal(err)
	}
	return toks, reason
}

// text is what the server answers for tokens generated after prompt.
func (v *env) text(prompt string, toks []int32) string {
	ids := v.tok.Encode(prompt, true, false)
	prev := ids[len(ids)-1]
	var b strings.Builder
	for _, t := range toks {
		b.Write(v.tok.SafePiece(prev, int(t)))
		prev = int(t)
	}
	return b.String()
}

// n=4 with a seed returns four different choices, each equal to the same
// request with n=1 and that choice's seed (seed+index), whole and
// streamed, through the official client with usage.
func TestNChoicesSeeded(t *testing.T) {
	v := sharedEnv(t)
	const body = `{"prompt":"Once upon a time","max_tokens":12,"temperature":1,"seed":%d%s}`
	res := complete(t, v.ts.URL, fmt.Sprintf(body, 7, `,"n":4`))
	if len(res.Choices) != 4 {
		t.Fatalf("%d choices", len(res.Choices))
	}
	seen := map[string]bool{}
	total := 0
	for i, ch := range res.Choices {
		if ch.Index != i {
			t.Errorf("choice %d has index %d", i, ch.Index)
		}
		one := complete(t, v.ts.URL, fmt.Sprintf(body, 7+i, ""))
		if one.Choices[0].Text != ch.Text || one.Choices[0].FinishReason != ch.FinishReason {
			t.Errorf("choice %d: %q (%s), n=1 with seed %d: %q (%s)", i, ch.Text, ch.FinishReason, 7+i, one.Choices[0].Text, one.Choices[0].FinishReason)
		}
		total += one.Usage.CompletionTokens
		seen[ch.Text] = true
	}
	if len(seen) != 4 {
		t.Errorf("the four choices are not all different: %v", res.Choices)
	}
	promptTokens := len(v.tok.Encode("Once upon a time", true, false))
	if res.Usage.PromptTokens != promptTokens || res.Usage.CompletionTokens != total {
		t.Errorf("usage %+v, want %d prompt tokens (once) and %d completion tokens (all choices)", res.Usage, promptTokens, total)
	}

	// Streamed through the official client, with usage: the same texts.
	c := client(v.ts.URL)
	stream := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model: "stories260K", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(12), Temperature: openai.Float(1), Seed: openai.Int(7), N: openai.Int(4),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	texts := make([]string, 4)
	finished := make([]int, 4)
	var usage *openai.CompletionUsage
	for stream.Next() {
		ch := stream.Current()
		if len(ch.Choices) == 0 {
			u := ch.Usage
			usage = &u
			continue
		}
		for _, cc := range ch.Choices {
			if usage != nil || finished[cc.Index] > 0 {
				t.Fatalf("a chunk for choice %d after its end or the usage", cc.Index)
			}
			texts[cc.Index] += cc.Text
			if cc.FinishReason != "" {
				finished[cc.Index]++
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range texts {
		if texts[i] != res.Choices[i].Text || finished[i] != 1 {
			t.Errorf("streamed choice %d: %q (finished %d times), whole: %q", i, texts[i], finished[i], res.Choices[i].Text)
		}
	}
	if usage == nil || usage.CompletionTokens != int64(total) || usage.PromptTokens != int64(promptTokens) {
		t.Errorf("streamed usage %+v", usage)
	}

	// Chat takes n too; best_of equal to n is accepted.
	code, _, b := post(t, v.ts.URL, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"n":3,"seed":1}`)
	var chat struct {
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &chat); code != http.StatusOK || err != nil || len(chat.Choices) != 3 || chat.Choices[2].Index != 2 {
		t.Errorf("chat n=3: status %d: %s", code, b)
	}
	if res := complete(t, v.ts.URL, `{"prompt":"x","max_tokens":2,"n":2,"best_of":2}`); len(res.Choices) != 2 {
		t.Errorf("best_of=n=2: %d choices", len(res.Choices))
	}
}

// A prompt of tokens is taken as it is: the same tokens as a text prompt
// give the same text; echo returns the prompt before the completion, whole
// and streamed; max_completion_tokens sets the length of a completion.
func TestTokenPromptsEchoAndMaxCompletionTokens(t *testing.T) {
	v := sharedEnv(t)
	const prompt = "Once upon a time"
	ids := v.tok.Encode(prompt, true, false)
	js, _ := json.Marshal(ids)
	want := v.reference(t, prompt, 10)
	for _, body := range []string{
		fmt.Sprintf(`{"prompt":%s,"max_tokens":10,"temperature":0}`, js),
		fmt.Sprintf(`{"prompt":[%s],"max_tokens":10,"temperature":0}`, js),
		fmt.Sprintf(`{"prompt":%q,"max_completion_tokens":10,"temperature":0}`, prompt),
	} {
		res := complete(t, v.ts.URL, body)
		if res.Choices[0].Text != want || res.Usage.PromptTokens != len(ids) || res.Usage.CompletionTokens != 10 {
			t.Errorf("%s: %q, usage %+v; want %q", body, res.Choices[0].Text, res.Usage, want)
		}
	}
	for _, p := range []string{fmt.Sprintf("%q", prompt), string(js)} {
		res := complete(t, v.ts.URL, fmt.Sprintf(`{"prompt":%s,"max_tokens":10,"temperature":0,"echo":true}`, p))
		if res.Choices[0].Text != prompt+want {
			t.Errorf("echo of %s: %q, want %q", p, res.Choices[0].Text, prompt+want)
		}
		_, _, body := post(t, v.ts.URL, "/v1/completions", fmt.Sprintf(`{"prompt":%s,"max_tokens":10,"temperature":0,"echo":true,"stream":true}`, p))
		var text string
		events := sseEvents(t, strings.NewReader(string(body)))
		for i, ev := range events[:len(events)-1] {
			var c completionResult
			if err := json.Unmarshal([]byte(ev), &c); err != nil {
				t.Fatal(err)
			}
			if i == 0 && c.Choices[0].Text != prompt {
				t.Errorf("echo stream of %s: first chunk %q, want the prompt", p, c.Choices[0].Text)
			}
			text += c.Choices[0].Text
		}
		if text != prompt+want {
			t.Errorf("echo stream of %s: %q", p, text)
		}
	}
}

// stop_token_ids end a choice at the first of them sampled (not returned,
// finish_reason "stop"); ignore_eos generates past the model's stop token.
func TestStopTokenIDsAndIgnoreEOS(t *testing.T) {
	v := sharedEnv(t)
	const prompt = "The dog"
	toks, _ := v.greedy(t, prompt, 30)
	stop := toks[5]
	k := slices.Index(toks, stop)
	res := complete(t, v.ts.URL, fmt.Sprintf(`{"prompt":%q,"max_tokens":30,"temperature":0,"stop_token_ids":[%d]}`, prompt, stop))
	if ch := res.Choices[0]; ch.FinishReason != "stop" || ch.Text != v.text(prompt, toks[:k]) || res.Usage.CompletionTokens != k {
		t.Errorf("stop token %d (first at %d): %q (%s, %d tokens), want %q", stop, k, ch.Text, ch.FinishReason, res.Usage.CompletionTokens, v.text(prompt, toks[:k]))
	}

	// Greedy, "The dog" ends with the model's stop token before 200 tokens.
	all, reason := v.greedy(t, prompt, 200)
	if reason != "stop" {
		t.Fatalf("greedy %q ended by %s after %d tokens; the test needs a stop", prompt, reason, len(all))
	}
	res = complete(t, v.ts.URL, fmt.Sprintf(`{"prompt":%q,"max_tokens":200,"temperature":0,"ignore_eos":true}`, prompt))
	if ch := res.Choices[0]; ch.FinishReason != "length" || res.Usage.CompletionTokens != 200 || !strings.HasPrefix(ch.Text, v.text(prompt, all)) {
		t.Errorf("ignore_eos: %s after %d tokens, text %q does not continue %q", ch.FinishReason, res.Usage.CompletionTokens, ch.Text, v.text(prompt, all))
	}
}
