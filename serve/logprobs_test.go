package serve_test

import (
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

// Log probabilities in OpenAI's shapes, whole and streamed, through the
// official client: one per token, the asked number of alternatives, and
// (greedy) the sampled token is the most likely one.
func TestLogprobsShapes(t *testing.T) {
	v := sharedEnv(t)
	c := client(v.ts.URL)
	res, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Model: "stories260K", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(6), Temperature: openai.Float(0), Logprobs: openai.Int(3),
	})
	if err != nil {
		t.Fatal(err)
	}
	lp := res.Choices[0].Logprobs
	if n := int(res.Usage.CompletionTokens); len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
		t.Fatalf("completion logprobs for %d tokens: %+v", n, lp)
	}
	if strings.Join(lp.Tokens, "") != res.Choices[0].Text {
		t.Errorf("tokens %q do not join to the text %q", lp.Tokens, res.Choices[0].Text)
	}
	for i, tl := range lp.TokenLogprobs {
		best := float64(-1e9)
		for _, v := range lp.TopLogprobs[i] {
			best = max(best, v)
		}
		if tl > 0 || len(lp.TopLogprobs[i]) == 0 || len(lp.TopLogprobs[i]) > 3 || tl != best {
			t.Errorf("token %d: logprob %v, top %v (greedy: the best)", i, tl, lp.TopLogprobs[i])
		}
	}

	chat, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: "stories260K", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")},
		MaxTokens: openai.Int(5), Temperature: openai.Float(0), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	content := chat.Choices[0].Logprobs.Content
	if len(content) != int(chat.Usage.CompletionTokens) {
		t.Fatalf("%d chat logprobs for %d tokens", len(content), chat.Usage.CompletionTokens)
	}
	var text string
	for i, tl := range content {
		text += tl.Token
		if len(tl.TopLogprobs) != 2 || tl.TopLogprobs[0].Logprob != tl.Logprob || tl.TopLogprobs[1].Logprob > tl.Logprob || len(tl.Bytes) != len(tl.Token) {
			t.Errorf("chat token %d: %+v", i, tl)
		}
	}
	if text != chat.Choices[0].Message.Content {
		t.Errorf("chat tokens %q, content %q", text, chat.Choices[0].Message.Content)
	}

	// Streamed, with usage: every token's log-probability arrives once.
	stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: "stories260K", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")},
		MaxTokens: openai.Int(5), Temperature: openai.Float(0), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var streamed []openai.ChatCompletionTokenLogprob
	var usage int64
	for stream.Next() {
		ch := stream.Current()
		if len(ch.Choices) == 0 {
			usage = ch.Usage.CompletionTokens
			continue
		}
		streamed = append(streamed, ch.Choices[0].Logprobs.Content...)
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(streamed) != len(content) || usage != chat.Usage.CompletionTokens {
		t.Fatalf("streamed %d logprobs (usage %d), whole %d", len(streamed), usage, len(content))
	}
	for i := range streamed {
		if streamed[i].Token != content[i].Token || streamed[i].Logprob != content[i].Logprob {
			t.Errorf("streamed token %d: %+v, whole %+v", i, streamed[i], content[i])
		}
	}
}
