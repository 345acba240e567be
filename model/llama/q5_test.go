package llama

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/quant"
)

// TestQ5ToQ8: Q5_0 blocks re-encoded as Q8_0 dequantise to the same bits,
// every 5-bit value and scale byte included.
func TestQ5ToQ8(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	const nb = 64
	b := make([]byte, nb*22)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	// Finite scales of either sign (a NaN's bits would compare unequal to
	// themselves): one exponent bit cleared, the sign kept.
	for i := 0; i < nb; i++ {
		b[i*22+1] &= 0xfb
	}
	q8 := q5ToQ8(b)
	want := make([]float32, nb*32)
	got := make([]float32, nb*32)
	if err := quant.Dequantize(quant.Q5_0, b, want); err != nil {
		t.Fatal(err)
	}
	if err := quant.Dequantize(quant.Q8_0, q8, got); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("value %d: Q8_0 %v, Q5_0 %v", i, got[i], want[i])
		}
	}
}

// q5Weights serves ws with its feed-forward down projections re-stored as
// Q5_0 (ggml's quantizer), or as the Q8_0 that q5ToQ8 makes of them.
type q5Weights struct {
	Weights
	asQ8 bool
}

func (w q5Weights) Weight(role string, layer int) (Weight, bool, error) {
	x, ok, err := w.Weights.Weight(role, layer)
	if !ok || err != nil || role != RoleDown {
		return x, ok, err
	}
	v := make([]float32, x.Rows*x.Cols)
	if err := decodeRow(x.Type, x.Data, v); err != nil {
		return x, ok, err
	}
	b := make([]byte, len(v)/32*22)
	if err := quant.Quantize(quant.Q5_0, v, b); err != nil {
		return x, ok, err
	}
	x.Type, x.Data = gguf.Q5_0, b
	if w.asQ8 {
		x.Type, x.Data = gguf.Q8_0, q5ToQ8(b)
	}
	return x, true, nil
}

// TestQ5_0Matrices: a file's Q5_0 matrices load as Q8_0 (MatrixTypes says
// so, with float32 storage asked for the rest), and the model's logits are
// the bits of the same file with those matrices stored as their Q8_0.
func TestQ5_0Matrices(t *testing.T) {
	dev := cpuDevice(t)
	var logits [2][]float32
	for i, asQ8 := range []bool{false, true} {
		l, err := OpenSource(Source{Model: fixtures + "r128.gguf"})
		must(t, err)
		s, err := dev.NewStream()
		must(t, err)
		m, err := NewFrom(dev, s, q5Weights{l.Weights, asQ8}, Options{Logits: true, Prefill: PrefillEager, DecodeBatchSizes: []int{1}})
		must(t, err)
		s.Close()
		l.Close()
		if got := m.Info().MatrixTypes; got != "f32, q8_0" {
			t.Errorf("Q8_0 %v: MatrixTypes %q, want \"f32, q8_0\"", asQ8, got)
		}
		logits[i] = eagerLogits(t, dev, m, []int32{1, 403, 407, 261, 378, 100, 7, 300, 511})
		m.Close()
	}
	for j := range logits[0] {
		if math.Float32bits(logits[0][j]) != math.Float32bits(logits[1][j]) {
			t.Fatalf("logit %d: %v from Q5_0, %v from its Q8_0", j, logits[0][j], logits[1][j])
		}
	}
}
