package llama

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/reprise-ml/reprise/model/llama2c"
)

// Synthetic configurations for benchmarks: Llama shapes with seeded random
// weights. The name is the approximate parameter count.
var syntheticConfigs = map[string]llama2c.Config{
	"6M":   {Dim: 256, Hidden: 688, Layers: 8, Heads: 8, KVHeads: 8, Vocab: 512, SeqLen: 512, SharedClassifier: true},
	"25M":  {Dim: 512, Hidden: 1376, Layers: 8, Heads: 8, KVHeads: 8, Vocab: 512, SeqLen: 512, SharedClassifier: true},
	"60M":  {Dim: 768, Hidden: 2048, Layers: 8, Heads: 12, KVHeads: 12, Vocab: 512, SeqLen: 512, SharedClassifier: true},
	"110M": {Dim: 768, Hidden: 2048, Layers: 12, Heads: 12, KVHeads: 12, Vocab: 32000, SeqLen: 1024, SharedClassifier: true},
	"300M": {Dim: 1024, Hidden: 2816, Layers: 24, Heads: 16, KVHeads: 8, Vocab: 32000, SeqLen: 1024, SharedClassifier: true},
	"1B":   {Dim: 2048, Hidden: 5632, Layers: 22, Heads: 32, KVHeads: 4, Vocab: 32000, SeqLen: 2048, SharedClassifier: false},
}

// SyntheticNames lists the synthetic configurations, smallest first.
func SyntheticNames() []string {
	names := make([]string, 0, len(syntheticConfigs))
	for n := range syntheticConfigs {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		return params(syntheticConfigs[names[i]]) < params(syntheticConfigs[names[j]])
	})
	return names
}

func params(c llama2c.Config) int64 {
	d, h, kv := int64(c.Dim), int64(c.Hidden), int64(c.KVDim())
	p := int64(c.Layers)*(2*d*d+2*kv*d+3*d*h+2*d) + int64(c.Vocab)*d + d
	if !c.SharedClassifier {
		p += int64(c.Vocab) * d
	}
	return p
}

// SyntheticConfig returns a named configuration.
func SyntheticConfig(name string) (llama2c.Config, error) {
	c, ok := syntheticConfigs[name]
	if !ok {
		return c, fmt.Errorf("llama: no synthetic model %q (have %s)", name, strings.Join(SyntheticNames(), ", "))
	}
	return c, nil
}

// Synthetic makes a checkpoint of a named configuration with weights drawn
// from a seeded normal distribution (scaled so activations stay finite) and
// unit norm weights.
func Synthetic(name string, seed uint64) (*llama2c.Checkpoint, error) {
	c, err := SyntheticConfig(name)
	if err != nil {
		return nil, err
	}
	return RandomCheckpoint(c, seed), nil
}

// RandomCheckpoint makes a checkpoint of any configuration with seeded random
// weights.
func RandomCheckpoint(c llama2c.Config, seed uint64) *llama2c.Checkpoint {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	mat := func(rows, cols int) []float32 {
		v := make([]float32, rows*cols)
		sd := 1 / math.Sqrt(float64(cols))
		for i := range v {
			v[i] = float32(r.NormFloat64() * sd)
		}
		return v
	}
	ones := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	d, h, kv := c.Dim, c.Hidden, c.KVDim()
	ck := &llama2c.Checkpoint{Config: c, TokenEmbedding: mat(c.Vocab, d), RMSFinal: ones(d)}
	for l := 0; l < c.Layers; l++ {
		ck.Layers = append(ck.Layers, llama2c.Layer{
			RMSAtt: ones(d), WQ: mat(d, d), WK: mat(kv, d), WV: mat(kv, d), WO: mat(d, d),
			RMSFFN: ones(d), W1: mat(h, d), W2: mat(d, h), W3: mat(h, d),
		})
	}
	if c.SharedClassifier {
		ck.Classifier = ck.TokenEmbedding
	} else {
		ck.Classifier = mat(c.Vocab, d)
	}
	return ck
}

// IsSynthetic reports whether name is a synthetic configuration.
func IsSynthetic(name string) bool { return slices.Contains(SyntheticNames(), name) }
