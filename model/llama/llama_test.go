package llama

import (
	"math"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/engine"
)

func TestBF16Rounding(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{
		{1, 0x3F80},
		{-2, 0xC000},
		{math.Float32frombits(0x3F808000), 0x3F80}, // a tie rounds to even
		{math.Float32frombits(0x3F818000), 0x3F82}, // a tie rounds to even, upwards
		{math.Float32frombits(0x3F808001), 0x3F81}, // above the tie
		{float32(math.Inf(1)), 0x7F80},
	} {
		if got := BF16(c.in); got != c.want {
			t.Errorf("BF16(%v) = %#x, want %#x", c.in, got, c.want)
		}
	}
	if nan := BF16(float32(math.NaN())); nan&0x7F80 != 0x7F80 || nan&0x7F == 0 {
		t.Errorf("NaN became %#x", nan)
	}
}

func TestSyntheticConfigs(t *testing.T) {
	names := SyntheticNames()
	if names[0] != "6M" || names[len(names)-1] != "1B" {
		t.Fatalf("names %v are not smallest first", names)
	}
	c, err := SyntheticConfig("25M")
	if err != nil {
		t.Fatal(err)
	}
	if p := params(c); p < 24e6 || p > 26e6 {
		t.Fatalf("25M has %d parameters", p)
	}
	if c.Dim != 512 || c.Hidden != 1376 || c.Layers != 8 || c.Heads != 8 || c.KVHeads != 8 || c.Vocab != 512 || c.SeqLen != 512 {
		t.Fatalf("25M is %+v", c)
	}
	if _, err := SyntheticConfig("3M"); err == nil || !strings.Contains(err.Error(), "25M") {
		t.Fatalf("unknown name: %v", err)
	}
	a, _ := Synthetic("6M", 7)
	b, _ := Synthetic("6M", 7)
	if a.Layers[3].W2[100] != b.Layers[3].W2[100] || a.Params() != params(a.Config) {
		t.Fatal("synthetic weights are not seeded")
	}
}

func TestLoadErrors(t *testing.T) {
	for _, src := range []Source{
		{Model: "m.bin"},                        // no tokenizer
		{Model: "m.bin", Synthetic: "6M"},       // both
		{Model: "/nonexistent", Tokenizer: "x"}, // missing file
		{Synthetic: "nope"},
	} {
		if _, _, _, err := Load(src); err == nil {
			t.Errorf("%+v loaded", src)
		}
	}
	ck, tok, name, err := Load(Source{})
	if err != nil || tok == nil || name != DefaultName || ck.Config.Dim != 64 {
		t.Fatalf("default: %v %v %q", err, tok, name)
	}
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, _, err := Open(dev, Source{}, Options{Prefill: "sometimes"}); err == nil {
		t.Fatal("a bad prefill mode was accepted")
	}
	m, _, err := Open(dev, Source{}, Options{Weights: accel.BF16, Prefill: PrefillWhole, LogProbGraphs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// Decode and prefill, each plain and scoring log probabilities.
	if len(m.Regions()) != 0 || len(m.Configs()) != 4 {
		t.Fatalf("whole prefill: %d regions, %d configs", len(m.Regions()), len(m.Configs()))
	}
	keys := map[string]int{}
	for _, c := range m.Configs() {
		keys[c.Walk+"/"+c.KeyInfo]++
	}
	if keys["decode/"] != 1 || keys["decode/"+engine.KeyLogProbs] != 1 || keys["prefill/"+engine.KeyLogProbs] != 1 {
		t.Fatalf("whole prefill configs by walk and key: %v", keys)
	}
	// bf16 matrices take half the bytes of float32 ones (norms stay f32).
	if info := m.Info(); info.WeightBytes >= ck.Params()*4 || info.WeightBytes <= ck.Params()*2 {
		t.Fatalf("bf16 weight bytes %d for %d parameters", info.WeightBytes, ck.Params())
	}
}

// The storage llama-quantize would choose, and its fallbacks for rows that
// are not whole blocks.
func TestQuantPlan(t *testing.T) {
	cfg := Config{Dim: 512, Hidden: 1376}
	for _, c := range []struct {
		wdt                 accel.DType
		mat, matH, out, emb accel.DType
	}{
		{accel.F32, accel.F32, accel.F32, accel.F32, 0},
		{accel.Q8_0, accel.Q8_0, accel.Q8_0, accel.Q8_0, accel.Q8_0},
		{accel.Q4_0, accel.Q4_0, accel.Q4_0, accel.Q6_K, accel.Q4_0},
		{accel.Q4_K, accel.Q4_K, accel.Q4_0, accel.Q6_K, accel.Q4_K}, // 1376 is not whole super-blocks
	} {
		p := quantPlan(cfg, c.wdt)
		if p.of(cfg.Dim) != c.mat || p.of(cfg.Hidden) != c.matH || p.output(cfg.Dim) != c.out || p.emb != c.emb {
			t.Errorf("%s: %s %s %s %s, want %s %s %s %s", c.wdt, p.of(cfg.Dim), p.of(cfg.Hidden), p.output(cfg.Dim), p.emb,
				c.mat, c.matH, c.out, c.emb)
		}
	}
	if fit(accel.Q6_K, 128) != accel.Q8_0 || fit(accel.Q4_0, 172) != accel.F32 {
		t.Errorf("fallbacks: %s %s", fit(accel.Q6_K, 128), fit(accel.Q4_0, 172))
	}
}
