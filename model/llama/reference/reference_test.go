package reference_test

import (
	"math"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/model/llama/reference"
	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/model/stories260k"
)

// The float64 oracle agrees with llama2.c's float32 one (an independent
// transliteration of run.c) on stories260K: interleaved pairs, θ = 10000,
// grouped-query attention, a shared classifier.
func TestMatchesLlama2c(t *testing.T) {
	ck, err := llama2c.ReadCheckpoint(stories260k.Checkpoint())
	if err != nil {
		t.Fatal(err)
	}
	cc := ck.Config
	c := reference.Config{Dim: cc.Dim, Hidden: cc.Hidden, Layers: cc.Layers, Heads: cc.Heads, KVHeads: cc.KVHeads,
		Vocab: cc.Vocab, SeqLen: cc.SeqLen, Eps: 1e-5, Theta: 10000, Tied: cc.SharedClassifier}
	w := &reference.Weights{Embed: ck.TokenEmbedding, Norm: ck.RMSFinal, LMHead: ck.Classifier}
	for _, L := range ck.Layers {
		w.Layers = append(w.Layers, reference.Layer{AttnNorm: L.RMSAtt, WQ: L.WQ, WK: L.WK, WV: L.WV, WO: L.WO,
			FFNNorm: L.RMSFFN, Gate: L.W1, Up: L.W3, Down: L.W2})
	}
	ref, err := reference.New(c, w)
	if err != nil {
		t.Fatal(err)
	}
	old := llama2c.NewReference(ck)
	tok := 1
	for pos := 0; pos < 40; pos++ {
		got, err := ref.Forward(tok, pos)
		if err != nil {
			t.Fatal(err)
		}
		want := old.Forward(tok, pos)
		if d := reference.RelErr(got, want); d > 1e-4 {
			t.Fatalf("position %d: logits differ by %.3g of the largest", pos, d)
		}
		if reference.Argmax(got) != reference.Argmax(want) {
			t.Fatalf("position %d: argmax %d, llama2c %d", pos, reference.Argmax(got), reference.Argmax(want))
		}
		tok = reference.Argmax(want)
	}
}

// Llama 3.1's frequencies (θ = 500000, head 128, factor 8, low 1, high 4,
// original 8192): short wavelengths kept, long ones divided by the factor,
// those between blended; one blended pair worked by hand.
func TestInvFreqLlama3(t *testing.T) {
	s := &reference.Llama3Scaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}
	plain := reference.InvFreq(128, 500000, nil)
	scaled := reference.InvFreq(128, 500000, s)
	var kept, divided, blended int
	for i, f := range plain {
		wave := 2 * math.Pi / f
		switch {
		case wave < 2048:
			kept++
			if scaled[i] != f {
				t.Errorf("pair %d (wavelength %.0f): %g, want it kept at %g", i, wave, scaled[i], f)
			}
		case wave > 8192:
			divided++
			if scaled[i] != f/8 {
				t.Errorf("pair %d (wavelength %.0f): %g, want %g", i, wave, scaled[i], f/8)
			}
		default:
			blended++
			if scaled[i] <= f/8 || scaled[i] >= f {
				t.Errorf("pair %d (wavelength %.0f): %g outside (%g, %g)", i, wave, scaled[i], f/8, f)
			}
		}
		if i > 0 && scaled[i] >= scaled[i-1] {
			t.Errorf("pair %d: frequency %g not below pair %d's %g", i, scaled[i], i-1, scaled[i-1])
		}
	}
	if kept == 0 || divided == 0 || blended == 0 {
		t.Errorf("kept %d, divided %d, blended %d: want each region covered", kept, divided, blended)
	}
	// Pair 32: f = 500000^(-64/128) = 1/707.1, wavelength 2π/f ≈ 4443
	// (between 2048 and 8192); smooth = (8192/4443 − 1)/3 ≈ 0.281.
	f := 1 / math.Sqrt(500000)
	smooth := (8192/(2*math.Pi/f) - 1) / 3
	if want := (1-smooth)*f/8 + smooth*f; math.Abs(scaled[32]-want) > 1e-15 || math.Abs(smooth-0.2813) > 1e-3 {
		t.Errorf("pair 32: %g, want %g (smooth %g)", scaled[32], want, smooth)
	}
}

// A rotate-half model equals the interleaved model whose q and k rows (and
// with them the q/k biases and the per-head norms' weights, which act on the
// same elements) are reordered: the conversion a loader of Hugging Face
// checkpoints into interleaved kernels must make in full.
func TestHalvesIsReorderedInterleaved(t *testing.T) {
	c := reference.Config{Dim: 24, Hidden: 40, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8, Vocab: 30, SeqLen: 16,
		Eps: 1e-6, Theta: 1e6, Halves: true, QKVBias: true, QKNorm: true,
		Scaling: &reference.Llama3Scaling{Factor: 4, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8}}
	w := reference.Random(c, 3)
	hf, err := reference.New(c, w)
	if err != nil {
		t.Fatal(err)
	}
	ci, wi := reference.Interleaved(c, w)
	il, err := reference.New(ci, wi)
	if err != nil {
		t.Fatal(err)
	}
	for pos, tok := range []int{3, 17, 29, 0, 5, 5, 11} {
		a, _ := hf.Forward(tok, pos)
		b, _ := il.Forward(tok, pos)
		if d := reference.RelErr(a, b); d > 1e-6 {
			t.Fatalf("position %d: rotate-half and reordered interleaved logits differ by %.3g", pos, d)
		}
	}
	// Without reordering the norms' weights they differ: the test sees them.
	// (From the second position on: a single position's attention is its
	// value whatever the query.)
	wi.Layers[0].QNorm = w.Layers[0].QNorm
	il, _ = reference.New(ci, wi)
	hf, _ = reference.New(c, w)
	var d float64
	for pos, tok := range []int{3, 17, 29} {
		a, _ := hf.Forward(tok, pos)
		b, _ := il.Forward(tok, pos)
		d = reference.RelErr(a, b)
	}
	if d < 1e-3 {
		t.Errorf("q_norm left in rotate-half order changed the logits by only %.3g", d)
	}
}

// Bad shapes are errors naming the tensor.
func TestNewRefusesBadShapes(t *testing.T) {
	c := reference.Config{Dim: 8, Hidden: 16, Layers: 1, Heads: 2, KVHeads: 1, HeadDim: 6, Vocab: 10, SeqLen: 4, Eps: 1e-6, Theta: 1e4, QKNorm: true}
	w := reference.Random(c, 1)
	w.Layers[0].KNorm = w.Layers[0].KNorm[:5]
	if _, err := reference.New(c, w); err == nil || !strings.Contains(err.Error(), "k_norm") {
		t.Errorf("short k_norm: %v", err)
	}
}
