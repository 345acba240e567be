package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/model/llama2c"
	"github.com/reprise-ml/reprise/model/stories260k"
)

func openCPU(t testing.TB) accel.Device {
	t.Helper()
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// testModel captures fewer prefill buckets than the default, to keep the
// race-instrumented suite quick. Its buckets hold every step of the
// reference prompts (a prefill of at most 16 tokens, decodes of one row);
// cmd/reprise's TestGenerateMatchesReference and TestPlanJSON capture the
// defaults.
var testModel = llama.Options{PrefillLengths: []int{16, 32, 64}, PrefillBatchSizes: []int{1, 8}}

type setup struct {
	e   *engine.Engine
	m   *llama.Model
	tok *llama2c.Tokenizer
}

// openEngine makes an engine of the embedded model (of options mo) on a
// CPU device of capacity bytes, not started, with the plan cache off
// unless eo names one. The engine, the model and the device are closed
// when the test ends, in that order.
func openEngine(t testing.TB, capacity int64, mo llama.Options, eo engine.Options) (*engine.Engine, *llama.Model, *llama2c.Tokenizer) {
	t.Helper()
	dev, err := accel.Open("cpu", 0, accel.Options{MemoryLimit: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	m, tok, err := llama.Open(dev, llama.Source{}, mo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if eo.PlanCache == "" {
		eo.PlanCache = "off"
	}
	e, err := engine.New(dev, m, eo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, m, tok
}

func start(t testing.TB, graphs bool, eo engine.Options, mo llama.Options) *setup {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	eo.Graphs = graphs
	e, m, tok := openEngine(t, 1<<30, mo, eo)
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &setup{e: e, m: m, tok: tok}
}

// generate mimics the reference program: the prompt's pieces, then the
// continuation's, then a newline; 256 positions in all.
func (s *setup) generate(t testing.TB, prompt string, steps int) string {
	t.Helper()
	toks := s.tok.Encode(prompt, true, false)
	p := make([]int32, len(toks))
	for i, x := range toks {
		p[i] = int32(x)
	}
	gen, _, err := s.e.Generate(context.Background(), engine.Request{Prompt: p, MaxTokens: steps - len(toks) + 1})
	if err != nil {
		t.Fatal(err)
	}
	return stories260k.Printed(s.tok.SafePiece, toks, gen)
}

// The two reference prompts' 256 positions equal the llama2.c program's,
// eager and replayed. The default buckets (five prefill lengths up to 256 by
// four batch sizes) would take most of this test's time to capture in the
// plain-Go build and hold no step of it that testModel's do not.
func TestReferenceOutputs(t *testing.T) {
	for _, graphs := range []bool{false, true} {
		s := start(t, graphs, engine.Options{}, testModel)
		for _, c := range []struct{ prompt, file string }{
			{"Once upon a time", "Once_upon_a_time.txt"},
			{"The little dog", "The_little_dog.txt"},
		} {
			want, err := os.ReadFile("../model/stories260k/testdata/" + c.file)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.generate(t, c.prompt, 256); got != string(want) {
				t.Errorf("graphs=%v %q:\ngot  %q\nwant %q", graphs, c.prompt, got, want)
			}
		}
	}
}

func tokens(tok *llama2c.Tokenizer, prompt string) []int32 {
	ids := tok.Encode(prompt, true, false)
	out := make([]int32, len(ids))
	for i, x := range ids {
		out[i] = int32(x)
	}
	return out
}

var prompts = []string{
	"Once upon a time", "The little dog", "Lily and Ben went to the park", "A big red ball",
	"Tom was sad because", "She found a shiny stone", "One day, a bird", "The sun was hot and",
	"Mom said", "They played all day", "Zzz qq", "café über naïve 🙂", "", "1 2 3 4 5",
	"The cat sat on the mat and looked at the moon",
}

// anyPromptSteps is the positions of TestAnyPromptMatchesReference's
// generations.
const anyPromptSteps = 120

// anyPromptFile holds llama2c.Generate's text of each of prompts at
// anyPromptSteps positions, a line of two quoted strings each (the prompt,
// the text): TestAnyPromptReference checks it, in the build without the
// vector kernels, and rewrites it with -rewrite.
const anyPromptFile = "any_prompt_reference.txt"

// readAnyPrompt reads anyPromptFile: each prompt's reference text.
func readAnyPrompt(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", anyPromptFile))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")[1:] {
		qp, err := strconv.QuotedPrefix(line)
		if err != nil {
			t.Fatalf("%s line %d: %v", anyPromptFile, i+2, err)
		}
		p, _ := strconv.Unquote(qp)
		text, err := strconv.Unquote(strings.TrimPrefix(line[len(qp):], " "))
		if err != nil {
			t.Fatalf("%s line %d: %v", anyPromptFile, i+2, err)
		}
		want[p] = text
	}
	for _, p := range prompts {
		if _, ok := want[p]; !ok {
			t.Fatalf("%s has no text for prompt %q (go test ./engine -run TestAnyPromptReference -rewrite)", anyPromptFile, p)
		}
	}
	return want
}

// Any prompt matches the reference implementation, graphs on and off, with
// every request batched with the others. The reference's texts are
// anyPromptFile's: making them took a third of this test's -race time, the
// same in both of CI's passes (llama2c.Generate is plain Go whatever the
// build), so TestAnyPromptReference makes them in one.
func TestAnyPromptMatchesReference(t *testing.T) {
	const steps = anyPromptSteps
	want := readAnyPrompt(t)
	for _, graphs := range []bool{false, true} {
		s := start(t, graphs, engine.Options{}, testModel)
		got := make([]string, len(prompts))
		done := make(chan int)
		for i, p := range prompts {
			go func() {
				got[i] = s.generate(t, p, steps)
				done <- i
			}()
		}
		for range prompts {
			<-done
		}
		for i, p := range prompts {
			if got[i] != want[p] {
				t.Errorf("graphs=%v prompt %q:\ngot  %q\nwant %q", graphs, p, got[i], want[p])
			}
		}
	}
}

type job struct {
	req  engine.Request
	want []int32
}

func jobs(tok *llama2c.Tokenizer, n int) []job {
	js := make([]job, n)
	for i := range js {
		p := prompts[i%len(prompts)]
		js[i].req = engine.Request{Prompt: tokens(tok, p), MaxTokens: 20 + (i*37)%90}
		if i%2 == 1 {
			js[i].req.Sampling = engine.Sampling{Temperature: 0.9, TopK: 40 * (i % 3), TopP: 0.95, Seed: uint64(1000 + i)}
		}
	}
	return js
}

// runAll submits every job at once and returns each one's tokens.
func runAll(t *testing.T, e *engine.Engine, js []job) [][]int32 {
	t.Helper()
	hs := make([]*engine.Handle, len(js))
	for i, j := range js {
		h, err := e.Submit(context.Background(), j.req)
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = h
	}
	return tokensOf(t, hs)
}

// drain reads a request's tokens to its end, and its error.
func drain(h *engine.Handle) ([]int32, error) {
	var toks []int32
	for o := range h.Outputs() {
		if o.Done {
			if o.Err != nil {
				return toks, fmt.Errorf("%s: %w", o.Reason, o.Err)
			}
			break
		}
		toks = append(toks, o.Token)
	}
	return toks, nil
}

// tokensOf drains every request, failing the test on an error.
func tokensOf(t *testing.T, hs []*engine.Handle) [][]int32 {
	t.Helper()
	out := make([][]int32, len(hs))
	for i, h := range hs {
		var err error
		if out[i], err = drain(h); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return out
}

// A request's tokens are the same alone or batched with up to 63 others,
// eager or replayed, in whatever bucket its batch landed, greedy or sampled.
func TestBatchInvariance(t *testing.T) {
	_, tok, err := llama.Default()
	if err != nil {
		t.Fatal(err)
	}
	js := jobs(tok, 64)
	// Shorter than jobs' lengths (8 to 71 tokens, all 64 different: 37 is
	// prime to 64): the requests still finish one after another, so the
	// batch still shrinks through every decode bucket from 64 to 1, and the
	// 64 requests run alone cost 40% less -race time.
	for i := range js {
		js[i].req.MaxTokens = 8 + (i*37)%64
	}
	alone := start(t, false, engine.Options{}, testModel)
	for i := range js {
		got := runAll(t, alone.e, js[i:i+1])
		js[i].want = got[0]
	}
	for _, graphs := range []bool{false, true} {
		s := start(t, graphs, engine.Options{}, testModel)
		got := runAll(t, s.e, js)
		for i := range js {
			if !slices.Equal(got[i], js[i].want) {
				t.Fatalf("graphs=%v request %d: batched %v, alone %v", graphs, i, got[i], js[i].want)
			}
		}
		if graphs {
			st := s.e.Stats()
			replays := int64(0)
			for _, ss := range st.Steps {
				if ss.Replay {
					replays += ss.Steps
				}
			}
			if replays == 0 {
				t.Fatal("no step replayed")
			}
			if st.PrePlanHits == 0 {
				t.Errorf("no pre-planned step was used: %+v", st)
			}
		}
	}
}

// A KV cache too small for the batch makes requests wait, not fail.
func TestKVBackpressure(t *testing.T) {
	_, tok, err := llama.Default()
	if err != nil {
		t.Fatal(err)
	}
	js := jobs(tok, 12)
	free := start(t, true, engine.Options{}, testModel)
	want := runAll(t, free.e, js)
	// 10 pages of 16 positions (plus the sink): at most a few requests fit
	// at once.
	tight := start(t, true, engine.Options{KVPages: 11}, testModel)
	got := runAll(t, tight.e, js)
	for i := range js {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("request %d under backpressure: %v, want %v", i, got[i], want[i])
		}
	}
	waitPagesFree(t, tight.e, "after every request finished")
	// A request that could never fit is refused at once, not queued forever.
	if _, err := tight.e.Submit(context.Background(), engine.Request{Prompt: tokens(tok, "Once"), MaxTokens: 400}); !errors.Is(err, engine.ErrInvalidRequest) {
		t.Fatalf("a request larger than the cache: %v", err)
	}
}

func TestCancelFreesPages(t *testing.T) {
	_, tok, err := llama.Default()
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, true, engine.Options{}, testModel)
	ctx, cancel := context.WithCancel(context.Background())
	h, err := s.e.Submit(ctx, engine.Request{Prompt: tokens(tok, "Once upon a time"), MaxTokens: 400})
	if err != nil {
		t.Fatal(err)
	}
	<-h.Outputs() // the first token
	cancel()
	var last engine.Output
	for o := range h.Outputs() {
		last = o
	}
	if !last.Done || last.Reason != "cancelled" {
		t.Fatalf("last output %+v", last)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.e.Stats().KVPagesUsed != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pages still used after cancel: %+v", s.e.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSubmitValidation(t *testing.T) {
	s := start(t, false, engine.Options{}, testModel)
	for _, req := range []engine.Request{
		{},
		{Prompt: []int32{1}, MaxTokens: 0},
		{Prompt: []int32{1, 9999}, MaxTokens: 1},
		{Prompt: []int32{1, -3}, MaxTokens: 1},
		{Prompt: []int32{1}, MaxTokens: 600},
		{Prompt: []int32{1}, MaxTokens: 1, Sampling: engine.Sampling{Temperature: -1}},
		{Prompt: []int32{1}, MaxTokens: 1, Sampling: engine.Sampling{TopP: 1.5}},
	} {
		if _, err := s.e.Submit(context.Background(), req); !errors.Is(err, engine.ErrInvalidRequest) {
			t.Errorf("%+v: %v, want ErrInvalidRequest", req, err)
		}
	}
}

// Planning: the prediction matches what capture took, the memory fraction
// caps the plan, and the plan cache is used and invalidated.
func TestPlanning(t *testing.T) {
	cache := t.TempDir()
	opts := engine.Options{PlanCache: cache}
	// Fewer and smaller prefill buckets than the defaults (12, up to 128
	// tokens by 4 prompts, not 20 up to 256 by 8), other than testModel's:
	// the planner still costs lengths and batch sizes from larger buckets'
	// throwaway captures, at a fraction of the -race time. The default set's
	// prediction is checked exactly by cmd/reprise's TestPlanJSON.
	s := start(t, true, opts, llama.Options{PrefillLengths: []int{16, 32, 64, 128}, PrefillBatchSizes: []int{1, 2, 4}})
	rep := s.e.Plan()
	if rep == nil || len(rep.Pools) != 2 {
		t.Fatalf("first start: %+v", rep)
	}
	// The region's runner captures into the forward's graph pool.
	if rs := s.e.Runners(); len(rep.Plan.Predicted) != 1 || rep.Pools[1].Pool != "graphs" || rs["blocks"].Pool() != rs["graphs"].Pool() {
		t.Fatalf("the region does not share the forward's pool: predicted %v", rep.Plan.Predicted)
	}
	outside := map[string]int64{}
	for _, p := range rep.Pools {
		if p.FromCache {
			t.Fatalf("pool %s came from an empty cache", p.Name)
		}
		pred := rep.Plan.Predicted[p.Pool]
		if diff := math.Abs(float64(p.Actual-pred)) / float64(pred); diff > 0.01 {
			t.Fatalf("pool %s predicted %d, capture took %d (%.1f%%)", p.Pool, pred, p.Actual, 100*diff)
		}
		outside[p.Pool] += p.ActualOutside
	}
	// Outside the pool too: outputs as the allocator packs them,
	// executables as measured.
	for name, got := range outside {
		if want := rep.Plan.Outside[name]; got != want {
			t.Fatalf("pool %s: predicted %d outside, capture took %d", name, want, got)
		}
	}
	// Sizing measured executables on copies it held until capture: the plan
	// had them to reuse.
	if rep.Reusable <= 0 {
		t.Fatalf("reusable executable memory %d: the measured copies were not held for the plan", rep.Reusable)
	}
	if rep.Plan.Count() != rep.Buckets() {
		t.Fatalf("with room for all, %d of %d planned: %v", rep.Plan.Count(), rep.Buckets(), rep.Why)
	}
	// Same model, device and configuration: the costs come from the cache.
	// Costs are cached per pool: fewer prefill shapes change the region's
	// key, not the decode graphs'.
	first := start(t, true, opts, testModel)
	if first.e.Plan().Pool("blocks").FromCache || !first.e.Plan().Pool("graphs").FromCache {
		t.Fatal("the plan cache is not keyed per pool configuration")
	}
	again := start(t, true, opts, testModel)
	for _, p := range again.e.Plan().Pools {
		if !p.FromCache {
			t.Fatalf("the second start did not use the plan cache for %s", p.Name)
		}
	}
	// Another configuration invalidates it.
	other := start(t, true, opts, llama.Options{PrefillLengths: []int{16, 32, 64}, PrefillBatchSizes: []int{1, 8}, DecodeBatchSizes: []int{1, 2, 4}})
	if other.e.Plan().Pool("graphs").FromCache || !other.e.Plan().Pool("blocks").FromCache {
		t.Fatal("a changed decode configuration did not invalidate (only) the decode pool's costs")
	}
	// A tight memory fraction leaves graphs out (but never the floor).
	dev := openCPU(t)
	m, _, err := llama.Open(dev, llama.Source{}, testModel)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fp := first.e.Plan().Plan
	// Room for the floor, the rest of the outputs' segments and half the
	// graphs.
	half := fp.Floor + fp.Reserve + fp.Total()/2
	mi := dev.MemInfo()
	used := mi.Total - mi.Free + first.e.KV().Bytes() // the engine's KV cache is allocated before it plans
	tight, err := engine.New(dev, m, engine.Options{Graphs: true, PlanCache: "off",
		MemoryFraction: float64(used+half) / float64(mi.Total)})
	if err != nil {
		t.Fatal(err)
	}
	defer tight.Close()
	if err := tight.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	tp := tight.Plan()
	if n := tp.Plan.Count(); n == 0 || n >= tp.Buckets() {
		t.Fatalf("a fraction with room for half the graphs planned %d of %d", n, tp.Buckets())
	}
	// Executable memory the plan reuses from the measured copies is held
	// already, outside the budget.
	if tp.Plan.Total()+tp.Plan.Floor+tp.Plan.Reserve-tp.Reusable > tp.Plan.Free {
		t.Fatalf("the plan (%d), floor (%d) and reserve (%d) less what it reuses (%d) exceed the budget %d",
			tp.Plan.Total(), tp.Plan.Floor, tp.Plan.Reserve, tp.Reusable, tp.Plan.Free)
	}
}

// Background capture serves at once, never leases a bucket before it is
// live, and gives the eager result throughout.
func TestBackgroundCapture(t *testing.T) {
	_, tok, err := llama.Default()
	if err != nil {
		t.Fatal(err)
	}
	js := jobs(tok, 16)
	eager := start(t, false, engine.Options{}, testModel)
	want := runAll(t, eager.e, js)
	bg := start(t, true, engine.Options{BackgroundCapture: true}, testModel)
	got := runAll(t, bg.e, js)
	for i := range js {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("request %d during background capture: %v, want %v", i, got[i], want[i])
		}
	}
	if bg.e.Stats().FirstTokenAfterStart <= 0 {
		t.Fatal("no time to first token after start")
	}
	// Capture finishes; then the same requests replay and still match.
	deadline := time.Now().Add(60 * time.Second)
	for len(bg.e.Runner().Buckets()) < 7 || bg.e.Stats().Finished == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("background capture did not finish: %v", bg.e.Runner().Buckets())
		}
		time.Sleep(10 * time.Millisecond)
	}
	got = runAll(t, bg.e, js)
	for i := range js {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("request %d after background capture: %v, want %v", i, got[i], want[i])
		}
	}
	tel := bg.e.Runner().Telemetry()
	live := map[string]bool{}
	for _, k := range bg.e.Runner().Buckets() {
		live[k.String()] = true
	}
	replays := int64(0)
	for _, b := range tel.Buckets {
		if !live[b.Bucket] {
			t.Fatalf("bucket %s replayed but never went live", b.Bucket)
		}
		replays += b.Replays
	}
	if replays == 0 {
		t.Fatal("nothing replayed after background capture")
	}
}

// Piecewise prefill: the block loop replays its captured region while the
// embedding and the logits stay eager; the logits equal eager bit for bit at
// every token bucket and at real lengths between buckets.
func TestPiecewisePrefillLogits(t *testing.T) {
	s := start(t, true, engine.Options{}, llama.Options{Logits: true, PrefillLengths: []int{16, 32, 64, 128}, PrefillBatchSizes: []int{1, 4}})
	r := rand.New(rand.NewPCG(5, 6))
	prompt := func(n int) []int32 {
		p := make([]int32, n)
		p[0] = 1
		for i := 1; i < n; i++ {
			p[i] = int32(3 + r.IntN(500))
		}
		return p
	}
	for _, c := range []struct {
		lengths []int
		replay  bool
	}{
		{[]int{16}, true}, {[]int{17}, true}, {[]int{31}, true}, {[]int{32}, true}, {[]int{33}, true},
		{[]int{64}, true}, {[]int{100}, true}, {[]int{128}, true},
		{[]int{5, 9, 2}, true}, {[]int{40, 40, 40, 8}, true},
		{[]int{200}, false},           // more tokens than any bucket: eager
		{[]int{4, 4, 4, 4, 4}, false}, // more prompts than any bucket: eager
	} {
		var ps [][]int32
		for _, n := range c.lengths {
			ps = append(ps, prompt(n))
		}
		eager, err := s.e.Prefill(context.Background(), ps, true)
		if err != nil {
			t.Fatal(err)
		}
		pw, err := s.e.Prefill(context.Background(), ps, false)
		if err != nil {
			t.Fatal(err)
		}
		if pw.Replayed != c.replay || eager.Replayed {
			t.Fatalf("lengths %v: replayed %v (eager run %v), want %v", c.lengths, pw.Replayed, eager.Replayed, c.replay)
		}
		if len(pw.Logits) != len(ps) {
			t.Fatalf("lengths %v: %d logit rows", c.lengths, len(pw.Logits))
		}
		for i := range ps {
			if !slices.Equal(accel.F32Bytes(pw.Logits[i]), accel.F32Bytes(eager.Logits[i])) {
				t.Fatalf("lengths %v prompt %d: piecewise logits differ from eager", c.lengths, i)
			}
		}
	}
	// Dropped or not, no shape was left unaccounted: every planned region
	// bucket is live.
	d := s.e.Plan()
	region := 0
	for _, k := range d.Plan.Buckets["graphs"] {
		if k.Walk == s.e.Runners()["blocks"].Configs()[0].Walk {
			region++
		}
	}
	if region != 8 {
		t.Fatalf("region buckets planned: %v", d.Plan.Buckets)
	}
}

// An engine whose context ended refuses new requests and still releases
// everything on Close.
func TestContextEndThenClose(t *testing.T) {
	dev := openCPU(t)
	m, tok, err := llama.Open(dev, llama.Source{}, testModel)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	before := dev.Allocator().Stats().Allocated
	e, err := engine.New(dev, m, engine.Options{Graphs: true, PlanCache: "off"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := e.Submit(context.Background(), engine.Request{Prompt: tokens(tok, "Hi"), MaxTokens: 2})
		if errors.Is(err, engine.ErrClosed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("submit after the context ended: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	e.Close()
	if after := dev.Allocator().Stats().Allocated; after != before {
		t.Fatalf("Close left %d bytes allocated", after-before)
	}
}

// canLeaseModel is llama with its prefill region's CanLease set: a region
// that refuses batches of more than two prompts.
type canLeaseModel struct {
	*llama.Model
	asked *int
}

func (m canLeaseModel) Regions() []engine.Region {
	rs := m.Model.Regions()
	out := make([]engine.Region, len(rs))
	for i, r := range rs {
		r.CanLease = func(rows []graph.Row) bool {
			*m.asked++
			return len(rows) <= 2
		}
		out[i] = r
	}
	return out
}

// A region that leases before its step asks its CanLease when the step is
// prepared: a batch it refuses runs the region eager though a shape fits,
// one it accepts replays, and both give the eager logits bit for bit.
func TestRegionCanLeaseBeforeStep(t *testing.T) {
	dev := openCPU(t)
	m, _, err := llama.Open(dev, llama.Source{}, llama.Options{Logits: true, PrefillLengths: []int{16, 32}, PrefillBatchSizes: []int{1, 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if rs := m.Regions(); len(rs) != 1 || !rs[0].LeaseBeforeStep {
		t.Fatalf("llama's prefill region does not lease before its step: %+v", rs)
	}
	asked := 0
	e, err := engine.New(dev, canLeaseModel{m, &asked}, engine.Options{Graphs: true, PlanCache: "off"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		prompts int
		replay  bool
	}{{1, true}, {2, true}, {3, false}, {4, false}} {
		var ps [][]int32
		for i := range c.prompts {
			ps = append(ps, []int32{1, int32(10 + i), int32(20 + 3*i), 7, 8})
		}
		before := asked
		eager, err := e.Prefill(context.Background(), ps, true)
		if err != nil {
			t.Fatal(err)
		}
		if asked != before {
			t.Fatal("an eager step asked the region's CanLease")
		}
		pw, err := e.Prefill(context.Background(), ps, false)
		if err != nil {
			t.Fatal(err)
		}
		if asked != before+1 {
			t.Fatalf("%d prompts: CanLease asked %d times, want once", c.prompts, asked-before)
		}
		if pw.Replayed != c.replay {
			t.Fatalf("%d prompts: replayed %v, want %v", c.prompts, pw.Replayed, c.replay)
		}
		for i := range ps {
			if !slices.Equal(accel.F32Bytes(pw.Logits[i]), accel.F32Bytes(eager.Logits[i])) {
				t.Fatalf("%d prompts: prompt %d's logits differ from eager", c.prompts, i)
			}
		}
	}
}

// A region that leases before its step is planned ahead as decode's next
// step is: on its runner's plan stream, never the replay stream, and its
// replay waits on the plan's event (DESIGN.md invariant 8). The region's
// plan stream is held back by a slow gate; the prefill still gives the
// eager logits bit for bit, and it cannot have finished before the gate: a
// plan written on the replay stream would not have waited for it.
func TestRegionPlannedAheadOnThePlanStream(t *testing.T) {
	dev := openCPU(t)
	m, _, err := llama.Open(dev, llama.Source{}, llama.Options{Logits: true, DecodeBatchSizes: []int{1},
		PrefillLengths: []int{16}, PrefillBatchSizes: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	e, err := engine.New(dev, m, engine.Options{Graphs: true, PlanCache: "off"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ps := e.RegionPlanStream(llama.RegionBlocks)
	if ps == nil || ps == e.Runner().Stream() {
		t.Fatalf("region plan stream %v", ps)
	}
	prompt := [][]int32{{1, 10, 20, 7, 8, 9}}
	eager, err := e.Prefill(context.Background(), prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	gate := acceltest.Gate(t, dev, 256, 8)
	if err := ps.Wait(gate); err != nil {
		t.Fatal(err)
	}
	pw, err := e.Prefill(context.Background(), prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	if !gate.Query() {
		t.Fatal("the prefill finished before its region's plan stream was let go: the region was not planned on it, or its replay did not wait")
	}
	if !pw.Replayed {
		t.Fatal("the region did not replay")
	}
	if !slices.Equal(accel.F32Bytes(pw.Logits[0]), accel.F32Bytes(eager.Logits[0])) {
		t.Fatal("the logits differ from eager")
	}
}
