package serve_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/reprise-ml/reprise/engine"
)

// Each logit-processing parameter reaches the engine as its definition
// says: the server's answer (a completion through the official client, in
// OpenAI's shape: one choice, its text, finish_reason and usage) is the
// engine's own generation with those engine.Penalties, and a chat request
// and a streamed one carry them too.
func TestPenaltyParameters(t *testing.T) {
	v := sharedEnv(t)
	c := client(v.ts.URL)
	const prompt = "Once upon a time"
	ids := v.tok.Encode(prompt, true, false)
	pr := make([]int32, len(ids))
	for i, x := range ids {
		pr[i] = int32(x)
	}
	plain, _, err := v.e.Generate(ctx, engine.Request{Prompt: pr, MaxTokens: 30})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts []option.RequestOption
		p    openai.CompletionNewParams
		pen  engine.Penalties
		temp float32
	}{
		{name: "presence_penalty", p: openai.CompletionNewParams{PresencePenalty: openai.Float(1.5)}, pen: engine.Penalties{Presence: 1.5}},
		{name: "frequency_penalty", p: openai.CompletionNewParams{FrequencyPenalty: openai.Float(2)}, pen: engine.Penalties{Frequency: 2}},
		{name: "repetition_penalty", opts: []option.RequestOption{option.WithJSONSet("repetition_penalty", 1.8)}, pen: engine.Penalties{Repetition: 1.8}},
		{name: "logit_bias", p: openai.CompletionNewParams{LogitBias: map[string]int64{fmt.Sprint(plain[1]): -100, "300": 7}},
			pen: engine.Penalties{LogitBias: map[int32]float32{plain[1]: -100, 300: 7}}},
		{name: "min_p", opts: []option.RequestOption{option.WithJSONSet("min_p", 0.3)}, p: openai.CompletionNewParams{Temperature: openai.Float(1.5), Seed: openai.Int(4)},
			pen: engine.Penalties{MinP: 0.3}, temp: 1.5},
		{name: "min_tokens", opts: []option.RequestOption{option.WithJSONSet("min_tokens", 3), option.WithJSONSet("stop_token_ids", []int{int(plain[0])})},
			pen: engine.Penalties{MinTokens: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.Model, p.Prompt, p.MaxTokens = "stories260K", openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)}, openai.Int(30)
			if !p.Temperature.Valid() {
				p.Temperature = openai.Float(0)
			}
			res, err := c.Completions.New(ctx, p, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			req := engine.Request{Prompt: pr, MaxTokens: 30, Penalties: tc.pen, Sampling: engine.Sampling{Temperature: tc.temp, Seed: 4}}
			if tc.name == "min_tokens" {
				req.StopTokens = []int32{plain[0]}
			}
			want, reason, err := v.e.Generate(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Choices) != 1 || res.Object != "text_completion" {
				t.Fatalf("%d choices, object %q", len(res.Choices), res.Object)
			}
			ch := res.Choices[0]
			if ch.Text != v.text(prompt, want) || string(ch.FinishReason) != reason || int(res.Usage.CompletionTokens) != len(want) {
				t.Fatalf("%q (%s, %d tokens), the engine with %+v: %q (%s, %d)", ch.Text, ch.FinishReason, res.Usage.CompletionTokens,
					tc.pen, v.text(prompt, want), reason, len(want))
			}
			if tc.name == "min_tokens" && len(want) < 3 {
				t.Fatalf("min_tokens 3 gave %d tokens", len(want))
			}
			if slices.Equal(want, plain) && tc.name != "min_p" {
				t.Errorf("%s changed nothing: %v", tc.name, want)
			}
		})
	}

	// Chat, whole and streamed, with the penalties.
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}
	cp := openai.ChatCompletionNewParams{Model: "stories260K", Messages: msgs, MaxTokens: openai.Int(30), Temperature: openai.Float(0),
		PresencePenalty: openai.Float(1), FrequencyPenalty: openai.Float(0.5), LogitBias: map[string]int64{"300": 3}}
	chat, err := c.Chat.Completions.New(ctx, cp, option.WithJSONSet("repetition_penalty", 1.4))
	if err != nil {
		t.Fatal(err)
	}
	st := c.Chat.Completions.NewStreaming(ctx, cp, option.WithJSONSet("repetition_penalty", 1.4))
	var text string
	for st.Next() {
		for _, ch := range st.Current().Choices {
			text += ch.Delta.Content
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if len(chat.Choices) != 1 || chat.Choices[0].Message.Content != text || text == "" {
		t.Fatalf("chat %+v, streamed %q", chat.Choices, text)
	}
	plainChat, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "stories260K", Messages: msgs, MaxTokens: openai.Int(30), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatal(err)
	}
	if plainChat.Choices[0].Message.Content == text {
		t.Errorf("the chat penalties changed nothing: %q", text)
	}
}
