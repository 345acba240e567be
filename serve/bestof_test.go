package serve_test

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
)

// best_of 4 with n 2 returns the two of the four candidates (the same
// request with n 4: choice i seeded seed+i) of the highest cumulative
// log-probability, best first, numbered 0 and 1, without log probabilities
// unless asked.
func TestBestOf(t *testing.T) {
	v := sharedEnv(t)
	const common = `"prompt":"Once upon a time","max_tokens":8,"temperature":1.2,"seed":11`
	type lpChoice struct {
		Text     string `json:"text"`
		Index    int    `json:"index"`
		Logprobs *struct {
			TokenLogprobs []float64 `json:"token_logprobs"`
		} `json:"logprobs"`
	}
	get := func(body string) []lpChoice {
		t.Helper()
		code, _, b := post(t, v.ts.URL, "/v1/completions", body)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", body, code, b)
		}
		var res struct {
			Choices []lpChoice `json:"choices"`
			Usage   struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		return res.Choices
	}
	all := get(`{` + common + `,"n":4,"logprobs":0}`)
	if len(all) != 4 {
		t.Fatalf("%d candidates", len(all))
	}
	sum := func(c lpChoice) float64 {
		s := 0.0
		for _, x := range c.Logprobs.TokenLogprobs {
			s += x
		}
		return s
	}
	ranked := slices.Clone(all)
	slices.SortStableFunc(ranked, func(a, b lpChoice) int { return cmp.Compare(sum(b), sum(a)) })
	if ranked[0].Text == ranked[3].Text {
		t.Fatalf("the candidates do not differ: %+v", all)
	}
	best := get(`{` + common + `,"n":2,"best_of":4}`)
	if len(best) != 2 {
		t.Fatalf("best_of 4, n 2: %d choices", len(best))
	}
	for i, c := range best {
		if c.Index != i || c.Text != ranked[i].Text || c.Logprobs != nil {
			t.Errorf("choice %d: %+v, want %q (cumulative %v) without logprobs", i, c, ranked[i].Text, sum(ranked[i]))
		}
	}
	withLP := get(`{` + common + `,"n":1,"best_of":4,"logprobs":0}`)
	if len(withLP) != 1 || withLP[0].Text != ranked[0].Text || withLP[0].Logprobs == nil || sum(withLP[0]) != sum(ranked[0]) {
		t.Errorf("best_of 4, n 1, logprobs: %+v, want %q", withLP, ranked[0].Text)
	}
}
