package serve

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/model/llama2c"
)

// countingTok is a llama2c tokenizer that counts its Encode calls.
type countingTok struct {
	*llama2c.Tokenizer
	encodes atomic.Int64
}

func (c *countingTok) Encode(text string, bos, eos bool) []int {
	c.encodes.Add(1)
	return c.Tokenizer.Encode(text, bos, eos)
}

// The bound the server refuses by is a bound: no text encodes to fewer
// tokens than ceil(len(text)/MaxBytesPerToken).
func TestMaxBytesPerTokenBounds(t *testing.T) {
	_, tok, err := llama.Default()
	if err != nil {
		t.Fatal(err)
	}
	maxB := tok.MaxBytesPerToken()
	// The vocabulary's longest pieces, repeated, are the tightest case.
	var pieces []string
	for id := 3 + 256; id < tok.Vocab(); id++ {
		pieces = append(pieces, string(tok.Piece(llama2c.EOS, id)))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 150 {
		var b strings.Builder
		n := rng.IntN(200)
		for range n {
			switch i % 3 {
			case 0:
				b.WriteString(pieces[rng.IntN(len(pieces))])
			case 1:
				b.WriteByte(byte(rng.IntN(256)))
			default:
				b.WriteString(" Once upon a time")
			}
		}
		text := b.String()
		least := (len(text) + maxB - 1) / maxB
		if got := len(tok.Encode(text, false, false)); got < least {
			t.Fatalf("%q: %d tokens, fewer than the bound %d (max %d bytes a token)", text, got, least, maxB)
		}
	}
}

// A prompt that cannot fit is refused without being encoded, and one whose
// client has left is not encoded or submitted.
func TestLongPromptRefusedBeforeEncoding(t *testing.T) {
	cs := closedServer(t)
	_, tok, err := llama.Default()
	if err != nil {
		t.Fatal(err)
	}
	ct := &countingTok{Tokenizer: tok}
	srv, err := New(cs.eng, cs.info, ct, Options{Logger: quietLogger(), MaxPromptTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	post := func(ctx context.Context, prompt string) *httptest.ResponseRecorder {
		b, _ := json.Marshal(map[string]any{"prompt": prompt})
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, pathCompletions, strings.NewReader(string(b)))
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		return w
	}
	maxB := tok.MaxBytesPerToken()
	w := post(context.Background(), strings.Repeat("a", 100*maxB+1))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "context_length_exceeded") || ct.encodes.Load() != 0 {
		t.Fatalf("status %d, %d encodes: %s", w.Code, ct.encodes.Load(), w.Body)
	}
	// At the bound the text may fit: it is encoded and judged by its tokens.
	post(context.Background(), strings.Repeat("a", 100*maxB))
	if ct.encodes.Load() != 1 {
		t.Fatalf("a prompt that may fit was not encoded (%d)", ct.encodes.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w = post(ctx, "Once upon a time")
	if ct.encodes.Load() != 1 || w.Code != 499 {
		t.Fatalf("a request whose client left: status %d, %d encodes", w.Code, ct.encodes.Load())
	}
}
