package llama

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/model/safetensors"
)

// mappedNow reports whether a file is mapped into this process (Linux).
func mappedNow(t *testing.T, path string) bool {
	t.Helper()
	abs, err := filepath.Abs(path)
	must(t, err)
	maps, err := os.ReadFile("/proc/self/maps")
	must(t, err)
	return strings.Contains(string(maps), abs)
}

// TestInPlaceWeights: tensors the CPU device reads from the file's mapped
// pages give the bits that uploaded copies give; the pages stay mapped
// after the source is closed, until the model is; and tensors that need
// converting (bf16 into f32, Hugging Face's rotate-half q and k, the
// float32 norms of a bf16 file) are still copied.
func TestInPlaceWeights(t *testing.T) {
	dev := cpuDevice(t)
	hf := writeStoriesHF(t, safetensors.BF16, 1)
	q8 := "../../quant/testdata/r128-Q8_0.gguf"
	cfg := FromLlama2c(mustDefault(t).Config)
	d, kv := int64(cfg.Dim), int64(cfg.KVDim())
	// stories260K's embedding is tied (kept float32): in place are v, o,
	// gate, up and down, as bf16.
	hfInPlace := int64(cfg.Layers) * 2 * (d*kv + d*d + 3*d*int64(cfg.Hidden))
	for _, c := range []struct {
		name, file string
		src        Source
		wdt        accel.DType
		inPlace    int64 // or allButRoPE, or some
	}{
		{"gguf f32", fixtures + "r128.gguf", Source{Model: fixtures + "r128.gguf"}, accel.F32, allButRoPE},
		// The matrices the file stores as Q8_0 are used as they are.
		{"gguf q8_0", q8, Source{Model: q8}, accel.Q8_0, some},
		{"hf bf16", filepath.Join(hf, safetensors.SingleName), Source{Model: hf, Tokenizer: tok512}, accel.BF16, hfInPlace},
		{"hf bf16 as f32", filepath.Join(hf, safetensors.SingleName), Source{Model: hf, Tokenizer: tok512}, accel.F32, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if raceEnabled && c.wdt == accel.Q8_0 {
				t.Skip("the quantized kernels under the race detector take 9 s here; run without -race")
			}
			var logits [2][]float32
			for i, d := range []accel.Device{uploadOnly{dev}, dev} {
				m, _, err := Open(d, c.src, Options{Weights: c.wdt, Logits: true, Prefill: PrefillEager, DecodeBatchSizes: []int{1}})
				must(t, err)
				want := int64(0)
				if i == 1 {
					switch want = c.inPlace; want {
					case allButRoPE:
						want = m.Info().WeightBytes - int64(4*len(mustFreqs(t, m.Config())))
					case some:
						if want = m.InPlaceBytes(); want == 0 || want >= m.Info().WeightBytes {
							t.Fatalf("%d of %d bytes read in place", want, m.Info().WeightBytes)
						}
					}
				}
				if got := m.InPlaceBytes(); got != want {
					t.Fatalf("%d bytes read in place, want %d", got, want)
				}
				if runtime.GOOS == "linux" && mappedNow(t, c.file) != (want > 0) {
					t.Fatalf("after Open (%d bytes in place) the file's mapping is there: %v", want, !(want > 0))
				}
				logits[i] = eagerLogits(t, dev, m, []int32{1, 403, 407, 261, 378, 100, 7, 300, 511})
				m.Close()
				if runtime.GOOS == "linux" && mappedNow(t, c.file) {
					t.Fatal("the file is still mapped after the model closed")
				}
			}
			for j := range logits[0] {
				if math.Float32bits(logits[0][j]) != math.Float32bits(logits[1][j]) {
					t.Fatalf("logit %d: %v uploaded, %v in place", j, logits[0][j], logits[1][j])
				}
			}
		})
	}
}

const (
	allButRoPE = -1 // every weight but the RoPE table, which is computed
	some       = -2 // more than none and fewer than all
)

func mustDefault(t *testing.T) *llama2c.Checkpoint {
	ck, _, err := Default()
	must(t, err)
	return ck
}

func mustFreqs(t *testing.T, cfg Config) []float32 {
	f, err := ropeFrequencies(cfg)
	must(t, err)
	return f
}

// eagerLogits is the last position's logits of one eager prefill of m.
func eagerLogits(t *testing.T, dev accel.Device, m *Model, prompt []int32) []float32 {
	t.Helper()
	e, err := engine.New(dev, m, engine.Options{Graphs: false, MaxBatch: 1, PlanCache: "off"})
	must(t, err)
	defer e.Close()
	must(t, e.Start(context.Background()))
	res, err := e.Prefill(context.Background(), [][]int32{prompt}, true)
	if err != nil || len(res.Logits) != 1 {
		t.Fatalf("prefill: %v", err)
	}
	return res.Logits[0]
}
