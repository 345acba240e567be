package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

func init() {
	register(command{name: "bench", summary: "time decode steps per batch size and prefill per prompt length, eager and replayed", run: runBench})
}

// BenchReport is `reprise bench --json`'s output. Times are nanoseconds.
type BenchReport struct {
	Model       string `json:"model"`        // model name
	Params      int64  `json:"params"`       // parameters
	WeightBytes int64  `json:"weight_bytes"` // bytes of weights on the device
	ReadBytes   int64  `json:"read_bytes"`   // of them, what one batch-1 forward reads
	Weights     string `json:"weights"`      // the matrices' storage types, by bytes, most first ("f32", "q4_k, q6_k")
	Device      string `json:"device"`       // device the steps ran on
	// MemoryBandwidth is the host memory read bandwidth the bench measured
	// (bytes/s) with cpu.ReadBandwidth, summing a 256 MiB array on every
	// core: the best of the probes in MemoryProbes.
	MemoryBandwidth float64 `json:"memory_read_bytes_per_s"`
	// MemoryProbes are every probe's figure (bytes/s), in order: one once
	// the engine has started, and one right after the batch-1 steps were
	// timed. On a machine shared with other tenants the bandwidth moves
	// by 2x within minutes (docs/BENCH.md), so a single probe taken a
	// minute before the steps can make them look faster than memory
	// allows; the roofline compares with the best, the strictest.
	MemoryProbes []float64  `json:"memory_probes_bytes_per_s"`
	Rows         []BenchRow `json:"rows"`
	// Prefill is the prefill latency of one prompt per length, eager and
	// with the block loop replayed piecewise.
	Prefill  []PrefillRow `json:"prefill,omitempty"`
	Roofline *BenchRoof   `json:"roofline,omitempty"`
	Capture  BenchCapture `json:"capture"`
}

// addProbe records one bandwidth probe: MemoryBandwidth is the best so far.
func (r *BenchReport) addProbe(bw float64) {
	r.MemoryProbes = append(r.MemoryProbes, bw)
	r.MemoryBandwidth = max(r.MemoryBandwidth, bw)
}

// BenchRow is one batch size: the median decode step eager and replayed.
type BenchRow struct {
	BatchSize    int     `json:"batch_size"`
	EagerStep    int64   `json:"eager_step_ns"`  // median eager decode step
	ReplayStep   int64   `json:"replay_step_ns"` // median replayed decode step (0: no graph fits)
	Ratio        float64 `json:"eager_over_replay"`
	EagerTokens  float64 `json:"eager_tokens_per_s"`
	ReplayTokens float64 `json:"replay_tokens_per_s"`
	// GFLOPs is the effective rate of the faster mode: 2 × parameters ×
	// batch size per step, in GFLOP/s (attention's work not counted).
	GFLOPs float64 `json:"effective_gflops"`
	Steps  int     `json:"steps"` // steps timed per mode
}

// PrefillRow is one prompt length: the median prefill step eager and
// piecewise (the block loop replayed, embedding and logits eager).
type PrefillRow struct {
	Tokens    int     `json:"tokens"`
	Eager     int64   `json:"eager_ns"`
	Piecewise int64   `json:"piecewise_ns"` // 0: no region shape fits
	Ratio     float64 `json:"eager_over_piecewise"`
	// GFLOPs is the effective rate of the faster mode: 2 × parameters ×
	// tokens per second, in GFLOP/s.
	GFLOPs float64 `json:"effective_gflops"`
	Runs   int     `json:"runs"`
}

// BenchRoof is the batch-size-1 roofline: weight bytes read per second by
// the replayed step against the measured memory bandwidth.
type BenchRoof struct {
	WeightBytesPerS float64 `json:"weight_bytes_per_s"`
	Fraction        float64 `json:"fraction_of_bandwidth"`
	// LastLevelCache is the CPU's largest cache in bytes (0: unknown).
	// Weights that fit in it are read from the cache, not from memory, so
	// Fraction may pass 1 without breaking the roofline.
	LastLevelCache int64 `json:"last_level_cache_bytes,omitempty"`
}

// BenchCapture is how long capturing took and how many buckets it made.
type BenchCapture struct {
	Seconds float64 `json:"seconds"`
	Buckets int     `json:"buckets"`
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", stderr)
	var df deviceFlags
	df.register(fs, true)
	sizes := intList{1, 2, 4, 8, 16, 32, 64}
	fs.Var(&sizes, "batch-sizes", "decode batch sizes to time, comma-separated")
	prefill := optionalList{16, 32, 64, 128, 256, 512}
	fs.Var(&prefill, "prefill-lengths", "prompt lengths to time prefill at, eager and piecewise, comma-separated (\"0\" skips prefill)")
	prefillRuns := fs.Int("prefill-runs", 5, "prefill steps timed per length and mode")
	steps := fs.Int("steps", 64, "decode steps timed per batch size and mode (fewer if --max-time runs out)")
	warmup := fs.Int("warmup", 4, "decode steps run before timing")
	maxTime := fs.Duration("max-time", 3*time.Second, "time budget per batch size and mode (at least 3 steps are timed)")
	asJSON := fs.Bool("json", false, "print the report as JSON (fields in docs/BENCH.md)")
	seed := fs.Uint64("seed", 1, "seed of a synthetic model's weights")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed steps to `file` (go tool pprof)")
	plot := fs.String("plot", "", "draw the decode step time against batch size, eager and replayed, into an SVG `file`")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	df.model.Seed = *seed
	maxBS := slices.Max(sizes)
	s, err := df.openSession(stderr, func(mo *llama.Options) {
		mo.DecodeBatchSizes, mo.PrefillBatchSizes = sizes, []int{1}
		mo.PrefillLengths = []int{}
		for _, n := range prefill {
			if n > 1 {
				mo.PrefillLengths = append(mo.PrefillLengths, n)
			}
		}
	}, engine.Options{Graphs: true, MaxBatch: maxBS})
	if err != nil {
		return err
	}
	defer s.Close()
	e, m, dev := s.eng, s.model, s.dev
	t0 := time.Now()
	if err := e.Start(ctx); err != nil {
		return err
	}
	info := m.Info()
	rep := BenchReport{Model: info.Name, Params: info.Params, WeightBytes: info.WeightBytes, ReadBytes: info.ReadBytes, Weights: df.weights,
		Device: dev.Info().String(), Capture: BenchCapture{Seconds: time.Since(t0).Seconds(), Buckets: len(e.Runner().Buckets())}}
	// The roofline compares the weights' read rate with the host's memory
	// bandwidth, whatever the device: cpu.ReadBandwidth measures the host's.
	rep.addProbe(cpu.ReadBandwidth(0))
	if info.MatrixTypes != "" {
		// A quantized file's matrices run as stored, whatever --weights says.
		rep.Weights = info.MatrixTypes
	}
	if rep.ReadBytes == 0 {
		rep.ReadBytes = rep.WeightBytes
	}
	for _, bs := range sizes {
		row := BenchRow{BatchSize: bs}
		ea, err := e.BenchDecode(ctx, bs, *warmup, *steps, *maxTime, true)
		if err != nil {
			return err
		}
		re, err := e.BenchDecode(ctx, bs, *warmup, *steps, *maxTime, false)
		if err != nil {
			return err
		}
		row.Steps = min(ea.Steps, re.Steps)
		row.EagerStep = ea.Median.Nanoseconds()
		row.EagerTokens = float64(bs) / ea.Median.Seconds()
		best := ea.Median
		if re.Replay {
			row.ReplayStep = re.Median.Nanoseconds()
			row.ReplayTokens = float64(bs) / re.Median.Seconds()
			row.Ratio = ea.Median.Seconds() / re.Median.Seconds()
			best = min(best, re.Median)
		}
		row.GFLOPs = 2 * float64(rep.Params) * float64(bs) / best.Seconds() / 1e9
		rep.Rows = append(rep.Rows, row)
		if bs == 1 {
			// Next to the steps the roofline judges (see MemoryProbes).
			rep.addProbe(cpu.ReadBandwidth(0))
		}
		if !*asJSON {
			fmt.Fprintf(stderr, "bs=%d done\n", bs)
		}
	}
	seqLen := m.Config().SeqLen
	for _, n := range prefill {
		if n > seqLen {
			continue
		}
		row, err := benchPrefill(ctx, e, n, *prefillRuns, info.Params)
		if err != nil {
			return err
		}
		rep.Prefill = append(rep.Prefill, row)
		if !*asJSON {
			fmt.Fprintf(stderr, "prefill %d done\n", n)
		}
	}
	for _, r := range rep.Rows {
		if r.BatchSize == 1 && r.ReplayStep > 0 {
			bw := float64(rep.ReadBytes) / (float64(r.ReplayStep) / 1e9)
			rep.Roofline = &BenchRoof{WeightBytesPerS: bw, Fraction: bw / rep.MemoryBandwidth, LastLevelCache: cpu.LastLevelCache()}
		}
	}
	if *plot != "" {
		if err := os.WriteFile(*plot, benchPlot(rep), 0o644); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printBench(stdout, rep)
	return nil
}

// benchPlot draws the decode rows as an SVG: median step time (log scale)
// against batch size (log scale), eager and replayed, each point labelled
// with its time, and the replayed tokens/s of the largest batch.
func benchPlot(r BenchReport) []byte {
	const (
		w, h                  = 820, 460
		left, right, top, bot = 90, 200, 56, 64
	)
	pw, ph := float64(w-left-right), float64(h-top-bot)
	var ts []float64
	for _, row := range r.Rows {
		for _, v := range []int64{row.EagerStep, row.ReplayStep} {
			if v > 0 {
				ts = append(ts, float64(v))
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left, svgEscape(fmt.Sprintf(
		"reprise bench: %s, %s weights", r.Model, r.Weights)))
	fmt.Fprintf(&b, `<text x="%d" y="40" fill="#555">%s</text>`+"\n", left, svgEscape(fmt.Sprintf(
		"decode step time (median) against batch size, on %s", r.Device)))
	if len(r.Rows) == 0 || len(ts) == 0 {
		b.WriteString("</svg>\n")
		return []byte(b.String())
	}
	minBS, maxBS := float64(r.Rows[0].BatchSize), float64(r.Rows[0].BatchSize)
	for _, row := range r.Rows {
		minBS, maxBS = math.Min(minBS, float64(row.BatchSize)), math.Max(maxBS, float64(row.BatchSize))
	}
	if maxBS == minBS {
		minBS, maxBS = minBS/2, maxBS*2
	}
	// y: from the 1-2-5 tick below the fastest step to the one above the
	// slowest, ticks at 1, 2 and 5 of each decade.
	lo, hi := tick125(slices.Min(ts), false), tick125(slices.Max(ts), true)
	if hi <= lo {
		hi = lo * 10
	}
	x := func(bs float64) float64 {
		return float64(left) + pw*(math.Log2(bs)-math.Log2(minBS))/(math.Log2(maxBS)-math.Log2(minBS))
	}
	y := func(ns float64) float64 {
		return float64(top) + ph*(1-(math.Log10(ns)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo)))
	}
	// grid and axes
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi*1.001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := d * m
			if v < lo*0.999 || v > hi*1.001 {
				continue
			}
			yy := y(v)
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
			}
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", left, yy, w-right, yy, stroke)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#333">%s</text>`+"\n", left-6, yy+4,
				svgEscape(time.Duration(v).String()))
		}
	}
	for _, row := range r.Rows {
		xx := x(float64(row.BatchSize))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`+"\n", xx, top, xx, h-bot)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333">%d</text>`+"\n", xx, h-bot+18, row.BatchSize)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#333"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">batch size (rows per decode step)</text>`+"\n", float64(left)+pw/2, h-bot+40)
	fmt.Fprintf(&b, `<text x="18" y="%.1f" text-anchor="middle" transform="rotate(-90 18 %.1f)">step time</text>`+"\n",
		float64(top)+ph/2, float64(top)+ph/2)
	series := []struct {
		name, color string
		get         func(BenchRow) int64
	}{
		{"eager", "#d62728", func(r BenchRow) int64 { return r.EagerStep }},
		{"replayed", "#1f77b4", func(r BenchRow) int64 { return r.ReplayStep }},
	}
	for i, s := range series {
		var pts []string
		for _, row := range r.Rows {
			if v := s.get(row); v > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(row.BatchSize)), y(float64(v))))
			}
		}
		if len(pts) == 0 {
			continue
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
		for _, row := range r.Rows {
			if v := s.get(row); v > 0 {
				xx, yy := x(float64(row.BatchSize)), y(float64(v))
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s, batch %d: %s</title></circle>`+"\n",
					xx, yy, s.color, s.name, row.BatchSize, svgEscape(time.Duration(v).String()))
			}
		}
		ly := top + 16 + 22*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", w-right+14, ly, w-right+40, ly, s.color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", w-right+46, ly+4, s.name)
	}
	// the eager/replayed ratio and replayed tokens/s of the largest batch
	ly := top + 16 + 22*len(series) + 10
	for _, row := range r.Rows {
		if row.ReplayStep > 0 {
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555" font-size="11">bs %d: %.2fx, %.0f tok/s</text>`+"\n",
				w-right+14, ly, row.BatchSize, row.Ratio, row.ReplayTokens)
			ly += 15
		}
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// tick125 is the largest 1, 2 or 5 times a power of ten at most v (up: the
// smallest at least v).
func tick125(v float64, up bool) float64 {
	d := math.Pow(10, math.Floor(math.Log10(v)))
	ticks := []float64{d, 2 * d, 5 * d, 10 * d}
	if up {
		for _, t := range ticks {
			if t >= v*0.999 {
				return t
			}
		}
		return 10 * d
	}
	for i := len(ticks) - 1; i >= 0; i-- {
		if ticks[i] <= v*1.001 {
			return ticks[i]
		}
	}
	return d
}

func svgEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// benchPrefill times a prefill of one n-token prompt, eager and piecewise:
// the median of runs steps each.
func benchPrefill(ctx context.Context, e *engine.Engine, n, runs int, params int64) (PrefillRow, error) {
	row := PrefillRow{Tokens: n, Runs: runs}
	prompt := make([]int32, n)
	prompt[0] = 1
	for i := 1; i < n; i++ {
		prompt[i] = int32(3 + (i*7)%200)
	}
	median := func(eager bool) (time.Duration, bool, error) {
		var ds []time.Duration
		replayed := false
		for i := 0; i < runs+1; i++ {
			r, err := e.Prefill(ctx, [][]int32{prompt}, eager)
			if err != nil {
				return 0, false, err
			}
			if i > 0 { // the first run warms caches
				ds = append(ds, r.Duration)
			}
			replayed = r.Replayed
		}
		slices.Sort(ds)
		return ds[len(ds)/2], replayed, nil
	}
	ed, _, err := median(true)
	if err != nil {
		return row, err
	}
	row.Eager = ed.Nanoseconds()
	best := ed
	pd, replayed, err := median(false)
	if err != nil {
		return row, err
	}
	if replayed {
		row.Piecewise = pd.Nanoseconds()
		row.Ratio = ed.Seconds() / pd.Seconds()
		best = min(best, pd)
	}
	row.GFLOPs = 2 * float64(params) * float64(n) / best.Seconds() / 1e9
	return row, nil
}

func printBench(w io.Writer, r BenchReport) {
	fmt.Fprintf(w, "model %s: %.1fM parameters, %s weights (%s), on %s\n", r.Model, float64(r.Params)/1e6,
		humanBytes(r.WeightBytes), r.Weights, r.Device)
	probes := ""
	if len(r.MemoryProbes) > 1 {
		gb := make([]string, len(r.MemoryProbes))
		for i, p := range r.MemoryProbes {
			gb[i] = fmt.Sprintf("%.1f", p/1e9)
		}
		probes = " (best of " + strings.Join(gb, ", ") + ")"
	}
	fmt.Fprintf(w, "graph capture: %s in %.2f s; memory read bandwidth: %.1f GB/s%s\n",
		plural(r.Capture.Buckets, "bucket"), r.Capture.Seconds, r.MemoryBandwidth/1e9, probes)
	fmt.Fprintf(w, "\n%5s %14s %14s %7s %14s %14s %9s\n", "batch", "eager step", "replay step", "ratio", "eager tok/s", "replay tok/s", "GFLOP/s")
	for _, row := range r.Rows {
		replay, ratio, rtok := "-", "-", "-"
		if row.ReplayStep > 0 {
			replay = time.Duration(row.ReplayStep).String()
			ratio = fmt.Sprintf("%.2fx", row.Ratio)
			rtok = fmt.Sprintf("%.1f", row.ReplayTokens)
		}
		fmt.Fprintf(w, "%5d %14s %14s %7s %14.1f %14s %9.2f\n", row.BatchSize, time.Duration(row.EagerStep), replay, ratio, row.EagerTokens, rtok, row.GFLOPs)
	}
	if len(r.Prefill) > 0 {
		fmt.Fprintf(w, "\n%7s %14s %14s %7s %12s\n", "prompt", "eager prefill", "piecewise", "ratio", "GFLOP/s")
		for _, p := range r.Prefill {
			pw, ratio := "-", "-"
			if p.Piecewise > 0 {
				pw, ratio = time.Duration(p.Piecewise).String(), fmt.Sprintf("%.2fx", p.Ratio)
			}
			fmt.Fprintf(w, "%7d %14s %14s %7s %12.2f\n", p.Tokens, time.Duration(p.Eager), pw, ratio, p.GFLOPs)
		}
	}
	if rf := r.Roofline; rf != nil {
		read := r.ReadBytes // runBench sets it, WeightBytes where the model gives none
		if rf.LastLevelCache > 0 && read <= rf.LastLevelCache {
			fmt.Fprintf(w, "\nbatch 1 replayed: weights read at %.2f GB/s; the weights (%s) fit in the CPU's last-level cache (%s),\n"+
				"so they are read from the cache, not memory: no memory roofline applies (%.0f%% of the memory bandwidth)\n",
				rf.WeightBytesPerS/1e9, humanBytes(read), humanBytes(rf.LastLevelCache), 100*rf.Fraction)
		} else {
			fmt.Fprintf(w, "\nbatch 1 replayed: weights read at %.2f GB/s, %.0f%% of the measured bandwidth\n", rf.WeightBytesPerS/1e9, 100*rf.Fraction)
		}
	}
}

// plural is "1 bucket", "2 buckets".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
