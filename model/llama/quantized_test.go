package llama

import (
	"context"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/gguf"
)

// ggufPieces decodes token ids the way llama.cpp prints them: "▁" is a
// space, byte tokens are their raw byte, control tokens their text.
func ggufPieces(t *testing.T, path string, ids []int32) string {
	toks := ggufTokens(t, path)
	var b strings.Builder
	for _, id := range ids {
		p := toks[id]
		if len(p) == 6 && strings.HasPrefix(p, "<0x") && p[5] == '>' {
			n, _ := strconv.ParseUint(p[3:5], 16, 8)
			b.WriteByte(byte(n))
			continue
		}
		b.WriteString(strings.ReplaceAll(p, "▁", " "))
	}
	return b.String()
}

// ggufTokenCache holds each file's token strings: TestQuantizedFixtures
// decodes a prefix per generated token and, at a near-tie, a text per
// vocabulary entry, and reading the table anew each time was most of its
// -race time.
var ggufTokenCache sync.Map // path -> []string

// ggufTokens is the file's tokenizer.ggml.tokens, read once per path.
func ggufTokens(t *testing.T, path string) []string {
	t.Helper()
	if toks, ok := ggufTokenCache.Load(path); ok {
		return toks.([]string)
	}
	f, err := gguf.Open(path)
	must(t, err)
	defer f.Close()
	toks, err := f.Strings("tokenizer.ggml.tokens")
	must(t, err)
	ggufTokenCache.Store(path, toks)
	return toks
}

// TestQuantizedFixtures: each of llama-quantize's files loads (dequantised
// into float32 storage), and its greedy continuation of "Once upon a time"
// equals what llama.cpp printed, up to the first near-tie: llama.cpp
// multiplies quantized weights by activations it quantizes too (Q8_0, Q8_K),
// reprise by the exact dequantised weights, so a token whose two best
// logits are within that rounding may flip. Where one does, the test
// requires the gap to be that small and logs it (docs/MODELS.md lists it).
func TestQuantizedFixtures(t *testing.T) {
	dev := cpuDevice(t)
	const qdir = "../../quant/testdata/"
	names := []string{"r128", "r128-Q8_0", "r128-Q4_0", "r256-Q4_K_M", "r256-Q6_K"}
	if raceEnabled {
		// One near-tie and one K-quant file (all of them without -race).
		names = []string{"r128-Q8_0", "r256-Q6_K"}
		if cpu.KernelSet() == "go" {
			// The plain-Go quantized kernels are ~20x slower than the
			// vector ones under -race (this test: 60 s in CI's plain
			// pass). Where vector kernels are built, accel/cpu's
			// TestQuantMatMul holds them to the plain-Go kernels' bits,
			// so the vector pass's K-quant file speaks for these; the
			// near-tie file runs here on the plain Go.
			names = names[:1]
		}
	}
	for _, c := range quantCases(names) {
		name, kv := c.name, c.kv
		t.Run(name+"/kv-"+kv.String(), func(t *testing.T) {
			path := qdir + name + ".gguf"
			wantRaw, err := os.ReadFile(fixtures + name + ".Once_upon_a_time.txt")
			must(t, err)
			want := strings.TrimSuffix(string(wantRaw), "\n")
			m, l, err := OpenLoaded(dev, Source{Model: path}, Options{Logits: true, Prefill: PrefillEager, DecodeBatchSizes: []int{1}})
			must(t, err)
			defer m.Close()
			// The matrices keep the file's types (llama-quantize's Q4_0 of
			// a 128-wide model stores the classifier as Q8_0: 128 is no
			// multiple of Q6_K's 256); inspect lists the same.
			wantTypes := map[string]string{"r128": "f32", "r128-Q8_0": "q8_0", "r128-Q4_0": "q4_0, q8_0", "r256-Q4_K_M": "q4_k, q6_k", "r256-Q6_K": "q6_k"}[name]
			if got := m.Info().MatrixTypes; got != wantTypes {
				t.Errorf("MatrixTypes %q, want %q", got, wantTypes)
			}
			e, err := engine.New(dev, m, engine.Options{MaxBatch: 1, PlanCache: "off", KVCacheDType: kv})
			must(t, err)
			defer e.Close()
			must(t, e.Start(context.Background()))
			ids := l.Text.Encode("Once upon a time", true, false)
			seq := make([]int32, len(ids))
			for i, x := range ids {
				seq[i] = int32(x)
			}
			gen, _, err := e.Generate(context.Background(), engine.Request{Prompt: seq, MaxTokens: 64})
			must(t, err)
			if got := ggufPieces(t, path, append(seq, gen...)); got == want {
				return
			}
			// The first difference: rerun its step as a prefill for the
			// logits, and measure how close llama.cpp's token was.
			n := 0
			for n < len(gen) && strings.HasPrefix(want, ggufPieces(t, path, append(seq, gen[:n+1]...))) {
				n++
			}
			if n == len(gen) {
				t.Fatalf("reprise's text is a prefix of llama.cpp's:\ngot  %q\nwant %q", ggufPieces(t, path, append(seq, gen...)), want)
			}
			ctx := append(seq, gen[:n]...)
			res, err := e.Prefill(context.Background(), [][]int32{ctx}, true)
			must(t, err)
			lg, next := res.Logits[0], res.Next[0]
			if next != gen[n] {
				t.Fatalf("prefill chose %d, decode %d", next, gen[n])
			}
			alt := -1
			for id := range lg {
				if p := ggufPieces(t, path, []int32{int32(id)}); p != "" && strings.HasPrefix(want, ggufPieces(t, path, append(append([]int32{}, ctx...), int32(id)))) {
					alt = id
					break
				}
			}
			if alt < 0 {
				t.Fatalf("after %q no token continues llama.cpp's text %q", ggufPieces(t, path, ctx), want)
			}
			gap := lg[next] - lg[alt]
			rel := float64(gap) / math.Abs(float64(lg[next]))
			t.Logf("%s: first difference after %d tokens (%q): reprise's token %d (logit %v), llama.cpp's %d (logit %v): gap %.3g (%.2g of the logit)",
				name, len(ctx), ggufPieces(t, path, ctx), next, lg[next], alt, lg[alt], gap, rel)
			// llama.cpp multiplies by quantized activations; reprise by the
			// exact ones, so a gap within that rounding is a near-tie. The
			// float32 file must match exactly.
			if !strings.Contains(name, "-Q") || rel > 0.03 {
				t.Fatalf("%s: a gap of %v (%.2g of the logit) is no near-tie", name, gap, rel)
			}
			if strings.HasPrefix(name, "r128-") {
				// Where the float32 model's own choice is one of the two,
				// the exact dequantised weights side with it.
				f32 := prefillLogits(t, dev, Source{Model: qdir + "r128.gguf"}, ctx)
				best := 0
				for i := range f32 {
					if f32[i] > f32[best] {
						best = i
					}
				}
				t.Logf("%s: the float32 model chooses %d there", name, best)
				if best == alt {
					t.Errorf("the float32 model sides with llama.cpp's %d, not reprise's %d", alt, next)
				}
			}
		})
	}
}

// quantCases are TestQuantizedFixtures' runs: each file with a float32 KV
// cache and with a binary16 one (llama.cpp's default, which printed the
// reference texts; reprise's --kv-cache-dtype auto for quantized files).
func quantCases(names []string) []struct {
	name string
	kv   accel.DType
} {
	var cs []struct {
		name string
		kv   accel.DType
	}
	for _, n := range names {
		for _, kv := range []accel.DType{accel.F32, accel.F16} {
			cs = append(cs, struct {
				name string
				kv   accel.DType
			}{n, kv})
		}
	}
	return cs
}
