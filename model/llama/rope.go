package llama

import (
	"fmt"
	"math"

	"github.com/reprise-ml/reprise/accel"
)

// ropeFrequencies is the RoPE frequency of each pair of a head, the table
// OpRoPETable reads: θ^(-2i/head_dim) as llama2.c computes it
// (accel.RoPEFreqs, so that llama2.c checkpoints keep its bits), divided by
// GGUF's per-pair factors (rope_freqs.weight, which llama.cpp's converter
// writes for Llama 3 scaling; ggml's rope divides θ by the pair's factor),
// or rescaled as Hugging Face's _compute_llama3_parameters
// (transformers/modeling_rope_utils.py, after Meta's apply_scaling in
// llama-models' model.py) defines it: a pair whose wavelength 2π/f is
// shorter than original/high_freq_factor keeps f, one longer than
// original/low_freq_factor takes f/factor, and between the two
// smooth = (original/wavelength − low_freq_factor) /
// (high_freq_factor − low_freq_factor) blends them:
// (1 − smooth)·f/factor + smooth·f. The scaling runs in float64 on the
// float32 base frequencies and rounds once.
func ropeFrequencies(c Config) ([]float32, error) {
	f := accel.RoPEFreqs(c.HeadDim, float32(c.RopeTheta))
	s := c.RopeScaling
	switch {
	case s == nil:
	case s.FreqFactors != nil:
		if len(s.FreqFactors) != len(f) {
			return nil, fmt.Errorf("llama: %d rope frequency factors for %d pairs", len(s.FreqFactors), len(f))
		}
		for i := range f {
			f[i] /= s.FreqFactors[i]
		}
	case s.Type == "llama3":
		if !(s.Factor > 0 && s.LowFreqFactor > 0 && s.HighFreqFactor > s.LowFreqFactor && s.OriginalContext > 0) {
			return nil, fmt.Errorf("llama: rope_scaling llama3 needs factor > 0, 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0; have %+v", *s)
		}
		orig := float64(s.OriginalContext)
		lowWave, highWave := orig/s.LowFreqFactor, orig/s.HighFreqFactor
		for i, v32 := range f {
			v := float64(v32)
			wave := 2 * math.Pi / v
			switch {
			case wave < highWave:
			case wave > lowWave:
				f[i] = float32(v / s.Factor)
			default:
				smooth := (orig/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				f[i] = float32((1-smooth)*v/s.Factor + smooth*v)
			}
		}
	default:
		return nil, notImplemented("rope_scaling", "type "+s.Type+": llama3 is implemented")
	}
	return f, nil
}
