package llama

import (
	"errors"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// weightBytes predicts what New uploads, for either storage.
func TestWeightBytes(t *testing.T) {
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, src := range []Source{{}, {Synthetic: "6M", Seed: 1}} {
		ck, _, _, err := Load(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, dt := range []accel.DType{accel.F32, accel.BF16, accel.Q8_0, accel.Q4_0, accel.Q4_K} {
			s, err := dev.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(dev, s, ck, Options{Weights: dt})
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := weightBytes(FromLlama2c(ck.Config), dt), m.Info().WeightBytes; got != want {
				t.Errorf("%+v %s: weightBytes %d, uploaded %d", src, dt, got, want)
			}
			m.Close()
		}
	}
}

// Weights that do not fit say how much they need and how much there is,
// not the allocator's chain.
func TestWeightsOutOfMemory(t *testing.T) {
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	_, _, err = Open(dev, Source{Synthetic: "6M", Seed: 1}, Options{})
	if !errors.Is(err, accel.ErrOutOfMemory) {
		t.Fatalf("got %v, want out of device memory", err)
	}
	for _, want := range []string{"the weights need ", " MiB (synthetic-6M, f32 weights); the device's memory is 16.0 MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "pool") || strings.Contains(err.Error(), "segment") {
		t.Errorf("%q speaks of the allocator", err)
	}
}
