package llama

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/model/gguf"
	"github.com/reprise-ml/reprise/model/safetensors"
)

// EnvLoad1B names a directory: TestLoad1B writes a synthetic 1B-parameter
// model there (once) as bf16 safetensors and as a bf16 GGUF, and measures
// loading each onto the CPU device against reading its bytes from the page
// cache, and the peak resident memory while loading (docs/MODELS.md).
const EnvLoad1B = "REPRISE_LOAD_1B"

// envLoadProbe runs one measured load in a child process (a clean peak).
const envLoadProbe = "REPRISE_LOAD_PROBE"

func TestLoad1B(t *testing.T) {
	dir := os.Getenv(EnvLoad1B)
	if dir == "" {
		t.Skip(EnvLoad1B + " is not set")
	}
	cfg, err := SyntheticConfig("1B")
	must(t, err)
	c := FromLlama2c(cfg)
	hfDir, ggufPath := filepath.Join(dir, "hf-1B-bf16"), filepath.Join(dir, "1B-bf16.gguf")
	if _, err := os.Stat(ggufPath); err != nil {
		writeSynthetic1B(t, c, hfDir, ggufPath)
	}
	// Each file loaded both ways, in one run: uploading a copy of every
	// tensor (what a device that cannot read host memory in place gets),
	// and as the CPU device loads it, reading the tensors the file stores
	// as it would in place.
	for _, p := range []string{hfDir, ggufPath} {
		for _, mode := range []string{probeCopy, probeInPlace} {
			cmd := exec.Command(os.Args[0], "-test.run=^TestLoadProbe$", "-test.v")
			cmd.Env = append(os.Environ(), envLoadProbe+"="+p, envLoadProbeMode+"="+mode)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", p, err, out)
			}
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, "load:") {
					t.Log(strings.TrimSpace(l))
				}
			}
		}
	}
}

// envLoadProbeMode says how the probe loads: probeCopy or probeInPlace.
const envLoadProbeMode = "REPRISE_LOAD_PROBE_MODE"

const (
	probeCopy    = "copy"
	probeInPlace = "in-place"
)

// uploadOnly is a device that does not read host memory in place (its
// HostAliaser is hidden), so that every tensor is uploaded: the load as
// before zero-copy loading, or as a GPU gets it. It keeps packing weights.
type uploadOnly struct{ accel.Device }

func (u uploadOnly) PackWeights(ts ...accel.Tensor) error {
	if p, ok := u.Device.(accel.WeightPacker); ok {
		return p.PackWeights(ts...)
	}
	return nil
}

// writeSynthetic1B writes seeded small bf16 values in both layouts.
func writeSynthetic1B(t *testing.T, c Config, hfDir, ggufPath string) {
	must(t, os.MkdirAll(hfDir, 0o755))
	x := uint64(0x9E3779B97F4A7C15)
	tensor := func(n int) []byte {
		b := make([]byte, 2*n)
		for i := range n {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			// A value in about ±0.03: sign, exponent 2^-6..2^-5, mantissa.
			binary.LittleEndian.PutUint16(b[2*i:], uint16(x>>48)&0x807F|0x3C80)
		}
		return b
	}
	type item struct {
		role       string
		layer      int
		rows, cols int
	}
	d, h, q, kv, v := c.Dim, c.Hidden, c.QDim(), c.KVDim(), c.Vocab
	items := []item{{RoleEmbedding, -1, v, d}, {RoleOutputNorm, -1, 1, d}, {RoleOutput, -1, v, d}}
	for l := range c.Layers {
		items = append(items, item{RoleAttnNorm, l, 1, d}, item{RoleQ, l, q, d}, item{RoleK, l, kv, d}, item{RoleV, l, kv, d},
			item{RoleO, l, d, q}, item{RoleFFNNorm, l, 1, d}, item{RoleGate, l, h, d}, item{RoleUp, l, h, d}, item{RoleDown, l, d, h})
	}
	var sts []safetensors.WriteTensor
	gw := gguf.NewWriter()
	for k, val := range map[string]any{"general.architecture": "llama", "general.name": "synthetic-1B", "llama.context_length": uint32(c.SeqLen),
		"llama.embedding_length": uint32(d), "llama.feed_forward_length": uint32(h), "llama.block_count": uint32(c.Layers),
		"llama.attention.head_count": uint32(c.Heads), "llama.attention.head_count_kv": uint32(c.KVHeads),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5), "llama.rope.freq_base": float32(10000)} {
		must(t, gw.Set(k, val))
	}
	for _, it := range items {
		data := tensor(it.rows * it.cols)
		shape := []int64{int64(it.rows), int64(it.cols)}
		gshape := []int64{int64(it.cols), int64(it.rows)}
		if it.rows == 1 {
			shape, gshape = []int64{int64(it.cols)}, []int64{int64(it.cols)}
		}
		sts = append(sts, safetensors.WriteTensor{Name: hfName(it.role, it.layer), DType: safetensors.BF16, Shape: shape, Data: data})
		must(t, gw.AddTensor(ggufName(it.role, it.layer), gguf.BF16, gshape, data))
	}
	f, err := os.Create(filepath.Join(hfDir, safetensors.SingleName))
	must(t, err)
	must(t, safetensors.Write(f, sts, nil))
	must(t, f.Close())
	conf := fmt.Sprintf(`{"architectures":["LlamaForCausalLM"],"hidden_size":%d,"intermediate_size":%d,"num_hidden_layers":%d,
"num_attention_heads":%d,"num_key_value_heads":%d,"vocab_size":%d,"max_position_embeddings":%d,"rms_norm_eps":1e-5,
"rope_theta":10000,"tie_word_embeddings":false,"hidden_act":"silu","torch_dtype":"bfloat16"}`, d, h, c.Layers, c.Heads, c.KVHeads, v, c.SeqLen)
	must(t, os.WriteFile(filepath.Join(hfDir, "config.json"), []byte(conf), 0o644))
	g, err := os.Create(ggufPath)
	must(t, err)
	_, err = gw.WriteTo(g)
	must(t, err)
	must(t, g.Close())
}

// statusKB reads a field of /proc/self/status in kB.
func statusKB(t *testing.T, field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			n, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

func TestLoadProbe(t *testing.T) {
	p := os.Getenv(envLoadProbe)
	if p == "" {
		t.Skip("run by TestLoad1B")
	}
	files := []string{p}
	if st, _ := os.Stat(p); st.IsDir() {
		files = []string{filepath.Join(p, safetensors.SingleName)}
	}
	// Read the bytes once to have them in the page cache, then time a
	// second read through a small buffer.
	var fileBytes int64
	read := func() time.Duration {
		t0 := time.Now()
		buf := make([]byte, 1<<20)
		for _, name := range files {
			f, err := os.Open(name)
			must(t, err)
			n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
			must(t, err)
			fileBytes = n
			f.Close()
		}
		return time.Since(t0)
	}
	read()
	readTime := read()
	// And into fresh memory, as a loader that keeps the bytes must (its
	// pages are faulted in and zeroed first).
	t1 := time.Now()
	for _, name := range files {
		b, err := os.ReadFile(name)
		must(t, err)
		_ = b
	}
	freshTime := time.Since(t1)
	debug.FreeOSMemory()
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 6 << 30})
	must(t, err)
	defer dev.Close()
	mode := os.Getenv(envLoadProbeMode)
	if mode == probeCopy {
		dev = uploadOnly{dev}
	}
	s, err := dev.NewStream()
	must(t, err)
	defer s.Close()
	// Reset the peak resident memory, so it measures the load alone.
	must(t, os.WriteFile("/proc/self/clear_refs", []byte("5"), 0))
	base := statusKB(t, "VmRSS")
	t0 := time.Now()
	var ws Weights
	if strings.HasSuffix(p, ".gguf") {
		f, err := gguf.Open(p)
		must(t, err)
		ws, err = GGUFWeights(f)
		must(t, err)
	} else {
		ws, err = OpenHF(p)
		must(t, err)
	}
	m, err := NewFrom(dev, s, ws, Options{Weights: accel.BF16})
	must(t, err)
	loadTime := time.Since(t0)
	ws.Close()
	peak := statusKB(t, "VmHWM")
	mi := dev.MemInfo()
	used := mi.Total - mi.Free
	if inPlace := m.InPlaceBytes(); (mode == probeCopy) != (inPlace == 0) {
		t.Fatalf("%s load: %d bytes read in place", mode, inPlace)
	}
	t.Logf("load: %s, %s: %d bytes; read from page cache %.2fs (into fresh memory %.2fs); load %.2fs (%.2fx, %.2fx); weights on the device %d MiB, %d MiB of them read in place (%d MiB with the CPU device's packed copies); peak RSS during load %d MiB above the %d MiB before (%.2fx the device's bytes)",
		filepath.Base(p), mode, fileBytes, readTime.Seconds(), freshTime.Seconds(), loadTime.Seconds(), loadTime.Seconds()/readTime.Seconds(), loadTime.Seconds()/freshTime.Seconds(),
		m.Info().WeightBytes>>20, m.InPlaceBytes()>>20, used>>20, (peak-base)>>10, base>>10, float64((peak-base)<<10)/float64(used))
	m.Close()
}
