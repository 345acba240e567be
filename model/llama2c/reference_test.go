package llama2c_test

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/model/stories260k"
)

// loadDefault parses the embedded stories260K model and its tokenizer.
func loadDefault(t testing.TB) (*llama2c.Checkpoint, *llama2c.Tokenizer) {
	t.Helper()
	c, err := llama2c.ReadCheckpoint(stories260k.Checkpoint())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := llama2c.ReadTokenizer(stories260k.Tokenizer(), c.Config.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	return c, tok
}

// TestGenerateMatchesReference is the key test: greedy generation must
// reproduce the reference C program's stdout byte for byte.
func TestGenerateMatchesReference(t *testing.T) {
	c, tok := loadDefault(t)
	for _, tc := range []struct{ prompt, file string }{
		{"Once upon a time", "Once_upon_a_time.txt"},
		{"The little dog", "The_little_dog.txt"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("..", "stories260k", "testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got := llama2c.Generate(c, tok, tc.prompt, 256)
			if got != string(want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				t.Fatalf("output differs from the reference at byte %d of %d (got %d bytes)\ngot:  %q\nwant: %q",
					i, len(want), len(got), got[max(0, i-40):min(len(got), i+40)], want[max(0, i-40):min(len(want), i+40)])
			}
		})
	}
}

// logitsHash runs the reference generation loop of Generate and returns the
// FNV-1a hash of the bits of every logit it computed, and the positions run.
func logitsHash(c *llama2c.Checkpoint, tok *llama2c.Tokenizer, prompt string, steps int) (uint64, int) {
	r := llama2c.NewReference(c)
	ids := tok.Encode(prompt, true, false)
	h := fnv.New64a()
	var b [4]byte
	token, pos := ids[0], 0
	for pos < steps {
		logits := r.Forward(token, pos)
		for _, v := range logits {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			h.Write(b[:])
		}
		next := 0
		if pos < len(ids)-1 {
			next = ids[pos+1]
		} else {
			for i, v := range logits {
				if v > logits[next] {
					next = i
				}
			}
		}
		pos++
		if next == llama2c.BOS {
			break
		}
		token = next
	}
	return h.Sum64(), pos
}

// TestLogitsBitExact pins every logit bit of the two reference generations.
// The hashes were computed from a C transliteration of run.c's forward (gcc
// -O2, no FMA contraction) whose expf, sinf, cosf and powf were replaced by
// the correctly rounded (float)exp((double)x) etc.: the Go logits equal it
// bit for bit. (Against glibc's own expf/sinf/cosf, which are not correctly
// rounded for a few inputs, the logits differ in their last bits while the
// text is the same.) A failure here with TestGenerateMatchesReference still
// passing means the float32 evaluation order or rounding changed, e.g. a
// fused multiply-add.
func TestLogitsBitExact(t *testing.T) {
	c, tok := loadDefault(t)
	for _, tc := range []struct {
		prompt    string
		hash      uint64
		positions int
	}{
		{"Once upon a time", 0xcfe190a51c71524f, 256},
		{"The little dog", 0xf8b4e94991cf70cb, 222}, // the model emits BOS at position 222
	} {
		h, n := logitsHash(c, tok, tc.prompt, 256)
		if h != tc.hash || n != tc.positions {
			t.Errorf("%q: logits hash %#x over %d positions, want %#x over %d", tc.prompt, h, n, tc.hash, tc.positions)
		}
	}
}

func TestGenerateSteps(t *testing.T) {
	c, tok := loadDefault(t)
	for _, tc := range []struct {
		prompt string
		steps  int
		want   string
	}{
		{"Once upon a time", 1, "Once\n"},
		{"Once upon a time", 3, "Once upon a\n"},
		{"Once upon a time", 4, "Once upon a time\n"},
		{"Once upon a time", 5, "Once upon a time,\n"}, // one generated token
		// Tokens: BOS, " ", "é", then the emoji's four byte tokens.
		{"é🙂", 1, "\n"},  // " " after BOS prints nothing
		{"é🙂", 2, "é\n"}, // "é" (two bytes) prints
		{"é🙂", 6, "é\n"}, // each lone byte of the emoji is dropped by safe print
	} {
		if got := llama2c.Generate(c, tok, tc.prompt, tc.steps); got != tc.want {
			t.Errorf("Generate(%q, %d) = %q, want %q", tc.prompt, tc.steps, got, tc.want)
		}
	}
	// An empty prompt starts from BOS alone.
	if got := llama2c.Generate(c, tok, "", 40); !strings.HasSuffix(got, "\n") || len(got) < 20 {
		t.Errorf("Generate(\"\", 40) = %q", got)
	}
}

func TestGenerateStepsClamp(t *testing.T) {
	cfg := llama2c.Config{Dim: 16, Hidden: 24, Layers: 2, Heads: 4, KVHeads: 2, Vocab: 300, SeqLen: 12}
	c := syntheticCheckpoint(cfg, 3)
	words := []string{" ", "a", "b", " a", "ab"}
	for len(words) < cfg.Vocab-259 {
		words = append(words, fmt.Sprintf("w%d", len(words)))
	}
	pieces, scores := syntheticVocab(map[string]float32{" a": 1, "ab": 2}, words...)
	tok, err := llama2c.ReadTokenizer(tokenizerFile(8, pieces, scores), len(pieces))
	if err != nil {
		t.Fatal(err)
	}
	if tok.Vocab() != cfg.Vocab {
		t.Fatalf("synthetic vocabulary has %d tokens, want %d", tok.Vocab(), cfg.Vocab)
	}
	full := llama2c.Generate(c, tok, "ab", cfg.SeqLen)
	for _, steps := range []int{0, -1, cfg.SeqLen + 1, 1 << 20} {
		if got := llama2c.Generate(c, tok, "ab", steps); got != full {
			t.Errorf("Generate(steps=%d) = %q, want %q (SeqLen steps)", steps, got, full)
		}
	}
}

func TestForwardPanics(t *testing.T) {
	cfg := llama2c.Config{Dim: 8, Hidden: 12, Layers: 1, Heads: 2, KVHeads: 1, Vocab: 10, SeqLen: 4, SharedClassifier: true}
	r := llama2c.NewReference(syntheticCheckpoint(cfg, 4))
	for _, tc := range []struct{ token, pos int }{{-1, 0}, {10, 0}, {0, -1}, {0, 4}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Forward(%d, %d) did not panic", tc.token, tc.pos)
				}
			}()
			r.Forward(tc.token, tc.pos)
		}()
	}
	inconsistent := syntheticCheckpoint(cfg, 4)
	inconsistent.RMSFinal = inconsistent.RMSFinal[:3]
	hugeCache := syntheticCheckpoint(llama2c.Config{Dim: 2, Hidden: 1, Layers: 1 << 12, Heads: 1, KVHeads: 1,
		Vocab: 3, SeqLen: 1 << 20, SharedClassifier: true}, 5)
	for name, c := range map[string]*llama2c.Checkpoint{"inconsistent": inconsistent, "huge cache": hugeCache} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewReference accepted a checkpoint with %s", name)
				}
			}()
			llama2c.NewReference(c)
		}()
	}
}

func TestForwardReset(t *testing.T) {
	cfg := llama2c.Config{Dim: 8, Hidden: 12, Layers: 2, Heads: 2, KVHeads: 1, Vocab: 10, SeqLen: 6, SharedClassifier: true}
	r := llama2c.NewReference(syntheticCheckpoint(cfg, 5))
	seq := []int{1, 4, 7, 2, 9, 3}
	run := func() [][]float32 {
		var out [][]float32
		for pos, tok := range seq {
			out = append(out, r.Forward(tok, pos))
		}
		return out
	}
	first := run()
	first[0][0] = 12345 // a fresh slice per call: this changes nothing else
	first[0][0] = run()[0][0]
	r.Reset()
	if again := run(); !reflect.DeepEqual(first, again) {
		t.Error("logits differ after Reset")
	}
	if reflect.DeepEqual(first[1], first[2]) {
		t.Error("different tokens gave identical logits")
	}
}

// forward64 is an independent float64 Llama forward over a whole token
// sequence, returning the logits at every position.
func forward64(c *llama2c.Checkpoint, tokens []int) [][]float64 {
	cfg := c.Config
	dim, hs, kvDim := cfg.Dim, cfg.HeadSize(), cfg.KVDim()
	mat := func(w []float32, x []float64, rows int) []float64 {
		out := make([]float64, rows)
		for i := range out {
			for j, xj := range x {
				out[i] += float64(w[i*len(x)+j]) * xj
			}
		}
		return out
	}
	norm := func(x []float64, w []float32) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		s := 1 / math.Sqrt(ss/float64(len(x))+1e-5)
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = float64(w[i]) * v * s
		}
		return out
	}
	rope := func(v []float64, pos int) {
		for i := 0; i < len(v); i += 2 {
			theta := float64(pos) / math.Pow(10000, float64(i%hs)/float64(hs))
			c, s := math.Cos(theta), math.Sin(theta)
			v[i], v[i+1] = v[i]*c-v[i+1]*s, v[i]*s+v[i+1]*c
		}
	}
	keys := make([][][]float64, cfg.Layers) // [layer][pos][kvDim]
	vals := make([][][]float64, cfg.Layers)
	cls := c.Classifier
	var all [][]float64
	for pos, tok := range tokens {
		x := make([]float64, dim)
		for i := range x {
			x[i] = float64(c.TokenEmbedding[tok*dim+i])
		}
		for l, w := range c.Layers {
			xb := norm(x, w.RMSAtt)
			q, k, v := mat(w.WQ, xb, dim), mat(w.WK, xb, kvDim), mat(w.WV, xb, kvDim)
			rope(q, pos)
			rope(k, pos)
			keys[l] = append(keys[l], k)
			vals[l] = append(vals[l], v)
			att := make([]float64, dim)
			for h := range cfg.Heads {
				kvh := h / (cfg.Heads / cfg.KVHeads)
				scores := make([]float64, pos+1)
				maxS := math.Inf(-1)
				for t := range scores {
					for i := range hs {
						scores[t] += q[h*hs+i] * keys[l][t][kvh*hs+i]
					}
					scores[t] /= math.Sqrt(float64(hs))
					maxS = max(maxS, scores[t])
				}
				var sum float64
				for t := range scores {
					scores[t] = math.Exp(scores[t] - maxS)
					sum += scores[t]
				}
				for t := range scores {
					for i := range hs {
						att[h*hs+i] += scores[t] / sum * vals[l][t][kvh*hs+i]
					}
				}
			}
			o := mat(w.WO, att, dim)
			for i := range x {
				x[i] += o[i]
			}
			xb = norm(x, w.RMSFFN)
			h1, h3 := mat(w.W1, xb, cfg.Hidden), mat(w.W3, xb, cfg.Hidden)
			for i := range h1 {
				h1[i] = h1[i] / (1 + math.Exp(-h1[i])) * h3[i]
			}
			d := mat(w.W2, h1, dim)
			for i := range x {
				x[i] += d[i]
			}
		}
		all = append(all, mat(cls, norm(x, c.RMSFinal), cfg.Vocab))
	}
	return all
}

// TestReferenceAgainstFloat64 checks the reference's semantics (RoPE,
// grouped-query attention, SwiGLU, shared and unshared classifiers) against
// an independent float64 implementation on random models.
func TestReferenceAgainstFloat64(t *testing.T) {
	for i, cfg := range []llama2c.Config{
		{Dim: 16, Hidden: 40, Layers: 2, Heads: 4, KVHeads: 4, Vocab: 50, SeqLen: 9, SharedClassifier: true},
		{Dim: 16, Hidden: 40, Layers: 2, Heads: 4, KVHeads: 2, Vocab: 50, SeqLen: 9, SharedClassifier: false},
		{Dim: 24, Hidden: 20, Layers: 3, Heads: 6, KVHeads: 1, Vocab: 33, SeqLen: 9, SharedClassifier: false},
		{Dim: 8, Hidden: 8, Layers: 1, Heads: 1, KVHeads: 1, Vocab: 5, SeqLen: 9, SharedClassifier: true},
	} {
		c := syntheticCheckpoint(cfg, uint64(10+i))
		tokens := make([]int, cfg.SeqLen)
		for p := range tokens {
			tokens[p] = (p*7 + 3) % cfg.Vocab
		}
		want := forward64(c, tokens)
		r := llama2c.NewReference(c)
		for pos, tok := range tokens {
			got := r.Forward(tok, pos)
			for j, g := range got {
				if d := math.Abs(float64(g) - want[pos][j]); d > 1e-4*(1+math.Abs(want[pos][j])) {
					t.Fatalf("config %v: pos %d logit %d = %v, float64 reference %v", cfg, pos, j, g, want[pos][j])
				}
			}
		}
	}
}
