package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/serve"
	"github.com/reprise-ml/reprise/tokenizer"
)

// deviceFlags are the flags every command that runs a model shares.
type deviceFlags struct {
	device   string
	memory   string
	fraction float64
	weights  string
	kvCache  string // --kv-cache-dtype: auto, f32 or f16
	model    llama.Source
	verbose  bool
	// logJSON writes the logs as JSON lines (serve's --log-format json).
	logJSON bool
}

func (d *deviceFlags) register(fs *flag.FlagSet, synthetic bool) {
	fs.StringVar(&d.device, "device", "cpu", "device to run on: `backend[:ordinal]` (cpu, opencl, cuda; see reprise devices)")
	fs.StringVar(&d.memory, "device-memory", "", "cap on the device memory reprise uses, e.g. 2GiB (CPU: the arena's capacity; default "+cpu.EnvMemory+" or a quarter of RAM)")
	fs.Float64Var(&d.fraction, "device-memory-fraction", 0.9, "fraction of the device memory that weights, KV cache and graphs may take together; graph capture is planned within it")
	fs.StringVar(&d.weights, "weights", "f32", "storage of weight matrices: f32, bf16, or quantized at load as llama-quantize does: q8_0, q4_0, q4_k (matrices a GGUF file stores as Q8_0, Q4_0, Q4_K or Q6_K are used as they are)")
	fs.StringVar(&d.kvCache, "kv-cache-dtype", "auto", "KV cache element type: f32, f16 (half the memory per position; values rounded to binary16 as llama.cpp's default cache does), or auto: f16 for quantized and bf16 weights where the device supports it, else f32")
	fs.StringVar(&d.model.Model, "model", "", "model `path`: a GGUF file, a Hugging Face directory or a llama2.c checkpoint, told apart by content (default: the embedded stories260K)")
	fs.StringVar(&d.model.Tokenizer, "tokenizer", "", "llama2.c tokenizer `path`: needed with a llama2.c checkpoint; replaces the model's own tokenizer")
	fs.IntVar(&d.model.MaxSeq, "max-model-len", 0, "context length to serve, in positions (0: the model's own; above it is allowed, with a warning)")
	if synthetic {
		fs.StringVar(&d.model.Synthetic, "synthetic", "", "a synthetic model with seeded random weights: "+strings.Join(llama.SyntheticNames(), ", "))
	}
	fs.BoolVar(&d.verbose, "v", false, "log progress at info level")
}

func (d *deviceFlags) check() error {
	if d.fraction <= 0 || d.fraction > 1 {
		return fmt.Errorf("%w: --device-memory-fraction %v: want a number in (0, 1]", errUsage, d.fraction)
	}
	switch d.kvCache {
	case "", "auto", "f32", "f16":
	default:
		return fmt.Errorf("%w: --kv-cache-dtype %q: want auto, f32 or f16", errUsage, d.kvCache)
	}
	return nil
}

// kvCacheDType is the KV cache type the flag asks for on dev, for a model
// whose matrices are stored as matrixTypes (engine.ModelInfo's): auto is
// f16 where the device has it and the weights are not float32 (a float32
// model keeps the float32 cache its references were computed with).
func (d *deviceFlags) kvCacheDType(dev accel.Device, matrixTypes string) accel.DType {
	switch d.kvCache {
	case "f32":
		return accel.F32
	case "f16":
		return accel.F16
	}
	if dev.Capability().KVCacheF16 && matrixTypes != "" && matrixTypes != "f32" {
		return accel.F16
	}
	return accel.F32
}

func (d *deviceFlags) open() (accel.Device, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	name, ord, err := accel.ParseDevice(d.device)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	var opts accel.Options
	if d.memory != "" {
		if opts.MemoryLimit, err = cpu.ParseBytes(d.memory); err != nil {
			return nil, fmt.Errorf("%w: --device-memory: %w", errUsage, err)
		}
	}
	return accel.Open(name, ord, opts)
}

func (d *deviceFlags) modelOptions() (llama.Options, error) {
	switch d.weights {
	case "f32":
		return llama.Options{Weights: accel.F32}, nil
	case "bf16":
		return llama.Options{Weights: accel.BF16}, nil
	case "q8_0":
		return llama.Options{Weights: accel.Q8_0}, nil
	case "q4_0":
		return llama.Options{Weights: accel.Q4_0}, nil
	case "q4_k":
		return llama.Options{Weights: accel.Q4_K}, nil
	}
	return llama.Options{}, fmt.Errorf("%w: --weights %q: want f32, bf16, q8_0, q4_0 or q4_k", errUsage, d.weights)
}

// session is a device, a model on it, and an engine over them.
type session struct {
	dev   accel.Device
	src   llama.Source
	opts  llama.Options // what the model was opened with
	model *llama.Model
	tok   llama.TextTokenizer
	vocab tokenizer.Tokenizer // the model's own tokenizer (nil for llama2.c's)
	eng   *engine.Engine
}

// openSession opens the flags' device and model (tweak adjusts the model's
// options) and an engine over them (its MemoryFraction comes from the
// flags, and its Logger too unless eo has one). Close releases all three.
func (d *deviceFlags) openSession(stderr io.Writer, tweak func(*llama.Options), eo engine.Options) (*session, error) {
	if err := fromEnv(&eo); err != nil {
		return nil, err
	}
	mo, err := d.modelOptions()
	if err != nil {
		return nil, err
	}
	if tweak != nil {
		tweak(&mo)
	}
	dev, err := d.open()
	if err != nil {
		return nil, err
	}
	s := &session{dev: dev, src: d.model, opts: mo}
	var loaded *llama.Loaded
	if s.model, loaded, err = llama.OpenLoaded(dev, d.model, mo); err != nil {
		s.Close()
		return nil, err
	}
	s.tok, s.vocab = loaded.Text, loaded.Vocab
	if eo.Logger == nil {
		eo.Logger = d.log(stderr)
	}
	eo.MemoryFraction = d.fraction
	if eo.KVCacheDType == 0 {
		eo.KVCacheDType = d.kvCacheDType(dev, s.model.Info().MatrixTypes)
	}
	for _, w := range loaded.Warnings {
		eo.Logger.Warn(w, "model", d.model.Model)
	}
	if s.eng, err = engine.New(dev, s.model, eo); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// reload opens the model at path with the session's options (new buffers)
// and has the engine serve it in place of the current one, which it closes.
// Reloads are serialised by the server.
func (s *session) reload(ctx context.Context, path string) (engine.ReloadResult, error) {
	src := llama.Source{Model: path, Tokenizer: s.src.Tokenizer, MaxSeq: s.src.MaxSeq}
	m, _, err := llama.OpenLoaded(s.dev, src, s.opts)
	if err != nil {
		return engine.ReloadResult{}, fmt.Errorf("%w: %s: %w", serve.ErrReloadModel, path, err)
	}
	res, err := s.eng.Reload(ctx, m)
	if err != nil {
		m.Close()
		return res, err
	}
	old := s.model
	s.model = m
	old.Close()
	return res, nil
}

func (s *session) Close() {
	if s.eng != nil {
		s.eng.Close()
	}
	if s.model != nil {
		s.model.Close()
	}
	s.dev.Close()
}

// log is the command's logger: warnings only, unless -v or REPRISE_LOG.
func (d *deviceFlags) log(stderr io.Writer) *slog.Logger {
	if d.verbose || os.Getenv("REPRISE_LOG") != "" {
		if os.Getenv("REPRISE_LOG") == "" {
			os.Setenv("REPRISE_LOG", "info")
		}
		return newLogger(stderr, d.logJSON)
	}
	return logHandler(stderr, slog.LevelWarn, d.logJSON)
}

// onOff is a flag that takes on or off.
type onOff bool

func (o *onOff) String() string {
	if *o {
		return "on"
	}
	return "off"
}

func (o *onOff) Set(s string) error {
	switch s {
	case "on", "true", "1":
		*o = true
	case "off", "false", "0":
		*o = false
	default:
		return fmt.Errorf("want on or off, not %q", s)
	}
	return nil
}

// intList is a flag of comma-separated positive integers.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	*l = nil
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("want comma-separated positive integers, not %q", v)
		}
		*l = append(*l, n)
	}
	return nil
}

// optionalList is an intList that "0" (or "none") empties.
type optionalList []int

func (l *optionalList) String() string { return (*intList)(l).String() }

func (l *optionalList) Set(v string) error {
	if v == "0" || v == "none" || v == "" {
		*l = nil
		return nil
	}
	return (*intList)(l).Set(v)
}

// The environment variables that configure the engine and its graph runner;
// they are read here, once, and passed down in engine.Options.
const (
	// envPlanCache is the plan cache directory when no --plan-cache is
	// given ("off" disables the cache).
	envPlanCache = "REPRISE_PLAN_CACHE"
	// envRequireGraphs "1" turns a dropped bucket into a start-up failure;
	// "0" (or unset) serves dropped buckets eager.
	envRequireGraphs = "REPRISE_REQUIRE_ACCELERATOR_GRAPHS"
)

// fromEnv fills what eo leaves unset from the environment.
func fromEnv(eo *engine.Options) error {
	if eo.PlanCache == "" {
		eo.PlanCache = os.Getenv(envPlanCache)
	}
	switch v := os.Getenv(envRequireGraphs); v {
	case "", "0":
	case "1":
		eo.Runner.RequireGraphs = true
	default:
		return fmt.Errorf("%w: %s=%q: want 1 (require every graph) or 0", errUsage, envRequireGraphs, v)
	}
	return nil
}
