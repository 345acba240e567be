package llama

import (
	"math"
	"math/rand/v2"
	"testing"

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
	// Finite scales (a NaN's bits would compare unequal to themselves).
	for i := 0; i < nb; i++ {
		b[i*22+1] &= 0x7b
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
