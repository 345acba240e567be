package llama

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/model/llama2c"
)

// weightBytes predicts what New uploads, for either storage.
func TestWeightBytes(t *testing.T) {
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	shared, _, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	// The same weights with a classifier of their own (stored as the
	// matrices are, like the embedding then).
	unshared := *shared
	unshared.Config.SharedClassifier = false
	unshared.Classifier = slices.Clone(shared.TokenEmbedding)
	for _, ck := range []*llama2c.Checkpoint{shared, &unshared} {
		src := ck.Config
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
				t.Errorf("%v %s: weightBytes %d, uploaded %d", src, dt, got, want)
			}
			// A forward reads all of a shared embedding (it is the
			// classifier too), one row of one that is only gathered.
			cfg := m.Config()
			want := m.Info().WeightBytes
			if !cfg.TiedEmbeddings {
				want -= m.emb.Buf.Len() - m.emb.DType.RowBytes(cfg.Dim)
			}
			if got := m.Info().ReadBytes; got != want || got <= 0 {
				t.Errorf("%v %s: read bytes %d, want %d (weights %d)", src, dt, got, want, m.Info().WeightBytes)
			}
			m.Close()
		}
	}
}

// Weights that do not fit say how much they need and how much there is,
// not the allocator's chain.
func TestWeightsOutOfMemory(t *testing.T) {
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ck, _, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	// stories260K with its layers four times over: 3.6 MiB.
	big := *ck
	for range 3 {
		big.Layers = append(big.Layers, ck.Layers...)
	}
	big.Config.Layers = len(big.Layers)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = New(dev, s, &big, Options{Name: "big"})
	if !errors.Is(err, accel.ErrOutOfMemory) {
		t.Fatalf("got %v, want out of device memory", err)
	}
	for _, want := range []string{"the weights need 3.6 MiB (big, f32 weights); the device's memory is 2.0 MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "pool") || strings.Contains(err.Error(), "segment") {
		t.Errorf("%q speaks of the allocator", err)
	}
}
