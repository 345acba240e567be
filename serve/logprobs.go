package serve

import "github.com/reprise-ml/reprise/engine"

// tokenLP is one generated token's log probabilities, with its text.
type tokenLP struct {
	text string
	lp   float32
	top  []altLP
}

type altLP struct {
	text string
	lp   float32
}

// tokenLP is the log probabilities of output o after token prev: each
// token's text is its piece after prev, as the response's text is made.
func (g *generation) tokenLP(prev int, o engine.Output) tokenLP {
	t := tokenLP{text: string(g.s.tok.SafePiece(prev, int(o.Token))), lp: o.LogProb}
	for _, a := range o.TopLogProbs {
		t.top = append(t.top, altLP{text: string(g.s.tok.SafePiece(prev, int(a.Token))), lp: a.LogProb})
	}
	return t
}

// OpenAI's shapes: completions' (legacy) log probabilities, and chat's.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float32            `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

type chatLogprob struct {
	Token       string       `json:"token"`
	Logprob     float32      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []chatTopLog `json:"top_logprobs"`
}

type chatTopLog struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

type chatLogprobs struct {
	Content []chatLogprob `json:"content"`
	Refusal []chatLogprob `json:"refusal"`
}

func byteList(s string) []int {
	b := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		b[i] = int(s[i])
	}
	return b
}

// logprobsOf is the response's logprobs of tokens (nil when not asked);
// a completion's text offsets start at off (the echoed prompt's length).
func (g *generation) logprobsOf(lps []tokenLP, off int) any {
	if !g.j.p.logprobs {
		return nil
	}
	if g.chat {
		out := chatLogprobs{Content: []chatLogprob{}}
		for _, t := range lps {
			c := chatLogprob{Token: t.text, Logprob: t.lp, Bytes: byteList(t.text), TopLogprobs: []chatTopLog{}}
			for _, a := range t.top {
				c.TopLogprobs = append(c.TopLogprobs, chatTopLog{Token: a.text, Logprob: a.lp, Bytes: byteList(a.text)})
			}
			out.Content = append(out.Content, c)
		}
		return out
	}
	out := completionLogprobs{Tokens: []string{}, TokenLogprobs: []float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
	for _, t := range lps {
		out.Tokens = append(out.Tokens, t.text)
		out.TokenLogprobs = append(out.TokenLogprobs, t.lp)
		top := map[string]float32{}
		for _, a := range t.top {
			if _, dup := top[a.text]; !dup {
				top[a.text] = a.lp
			}
		}
		out.TopLogprobs = append(out.TopLogprobs, top)
		out.TextOffset = append(out.TextOffset, off)
		off += len(t.text)
	}
	return out
}

// chunkLP is a stream chunk of choice c carrying the log probabilities of
// the tokens that arrived since its last chunk.
func (g *generation) chunkLP(c *choice, text string, reason *string) any {
	v := g.chunk(c.index, text, reason)
	if !g.j.p.logprobs || c.sent == len(c.lp) {
		return v
	}
	lp := g.logprobsOf(c.lp[c.sent:], 0)
	c.sent = len(c.lp)
	switch ch := v.(type) {
	case chatChunk:
		ch.Choices[0].Logprobs = lp
		return ch
	case completion:
		ch.Choices[0].Logprobs = lp
		return ch
	}
	return v
}
