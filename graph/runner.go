package graph

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/comm"
)

// NumWarmup is the number of eager runs before each capture.
const NumWarmup = 2

// ErrGraphsRequired: a declared bucket will not replay (its walk is
// blocked, the plan left it out, or its capture was dropped) and
// Options.RequireGraphs is set.
var ErrGraphsRequired = errors.New("accelerator graphs required")

// Unreplayed is a declared bucket that will not replay, and why: its step
// uses a resource that cannot be captured, the capture plan left it out, or
// its capture was dropped. Steps of its shape run eager.
type Unreplayed struct {
	Runner string
	Bucket BucketKey
	Reason string
}

func (u Unreplayed) String() string { return fmt.Sprintf("%s %v (%s)", u.Runner, u.Bucket, u.Reason) }

// RequiredError is the one error that names every bucket in missing and why
// (ErrGraphsRequired), or nil when missing is empty: what a deployment that
// requires graphs gets instead of serving at eager latency.
func RequiredError(missing []Unreplayed) error {
	if len(missing) == 0 {
		return nil
	}
	parts := make([]string, len(missing))
	for i, u := range missing {
		parts[i] = u.String()
	}
	return fmt.Errorf("graph: %d declared bucket(s) will not replay: %s: %w", len(missing), strings.Join(parts, "; "), ErrGraphsRequired)
}

// Options configure a Runner.
type Options struct {
	// Name labels the runner in logs and padding handles.
	Name string
	// Group is the ranks that must keep the same graphs (nil: one rank).
	Group comm.Group
	// Pool is a graph pool shared with other runners of the node (nil: the
	// runner makes its own).
	Pool accel.Pool
	// Stream is the stream to capture and replay on (nil: the runner makes
	// its own). Regions share the stream of the forward around them, so
	// their replays are ordered with it.
	Stream accel.Stream
	// Logger (nil: slog.Default()).
	Logger *slog.Logger
	// NoGoldenCheck skips the replay-against-eager check before a bucket is
	// registered.
	NoGoldenCheck bool
	// Tolerance of the golden check on devices whose Capability is not
	// Deterministic (relative; default 1e-3). Deterministic devices compare
	// bit for bit.
	Tolerance float64
	// RequireGraphs makes Capture fail (ErrGraphsRequired, one error naming
	// each) when any declared bucket will not replay: a walk blocked by a
	// resource that cannot be captured, a bucket the plan left out, a
	// dropped capture (see Unreplayed). The command line sets it from
	// REPRISE_REQUIRE_ACCELERATOR_GRAPHS.
	RequireGraphs bool
	// Progress, if set, is called after each capture with the number done,
	// the total, and the capture just finished (for progress bars and logs).
	Progress func(done, total int, spec SlotSpec, err error)
	// KeepFree, if set, is the device memory a warm-up must leave free (for
	// the largest eager step): one that leaves less is undone and its
	// bucket not planned.
	KeepFree func() int64
}

// Slot is one captured graph and the buffers its replay reads and writes.
type Slot struct {
	graph     accel.Graph
	exec      accel.Exec
	static    map[string]accel.Tensor
	inputKeys []string
	outputs   map[string]accel.Tensor
	padIDs    []int64
	configIdx int
	outside   int64 // the executable's memory outside the allocator
}

// Outputs are the slot's static output buffers (outside the graph pool),
// valid until the slot's next replay.
func (s *Slot) Outputs() map[string]accel.Tensor { return s.outputs }

// lookupBucket is the captured slots of one shape.
type Bucket struct {
	Key       BucketKey
	Config    *Config
	ConfigIdx int
	Slots     []*Slot
}

// Runner captures and replays one node's buckets.
type Runner struct {
	name   string
	dev    accel.Device
	node   Node
	group  comm.Group
	log    *slog.Logger
	opts   Options
	nslots int

	configs []*Config
	eager   map[string][]string // blocked walk -> resources

	stream  accel.Stream // capture and replay
	plan    accel.Stream // pre-planning
	pool    accel.Pool
	ownPool bool
	stager  *accel.Stager
	pad     *PaddingRows

	static      map[staticKey]*staticBuf
	specs       []SlotSpec
	prepared    bool
	warmedSpecs map[specKey]*warmed // warmed by sizing, not yet captured
	warmIdx     int                 // next spec WarmNext warms
	// warmDeferred: the last WarmNext left its spec for later (WarmDeferred)
	warmDeferred bool
	warmFailed   map[BucketKey]bool
	execMem      map[int]*ExecMemory // per config: measured on its first throwaway graph

	mu      sync.Mutex
	buckets map[BucketKey]*Bucket // by capture key
	byWalk  map[string][]*Bucket  // by every walk that may replay them
	dropped []BucketKey
	// unreplayed: every declared bucket that will not replay, and why.
	unreplayed map[BucketKey]string
	counters   map[BucketKey]int
	declare    map[SlotKey][]Row
	tele       telemetry
}

// New makes a runner for node's configs on dev. It refuses (before any buffer
// is allocated) every config whose step uses a resource that cannot be
// captured; those walks run eager (EagerWalks).
func New(dev accel.Device, node Node, configs []*Config, opts Options) (*Runner, error) {
	if !dev.Capability().GraphCapture {
		return nil, fmt.Errorf("graph: device %v cannot capture graphs: %w", dev.Info(), accel.ErrUnsupported)
	}
	if opts.Name == "" {
		opts.Name = "runner"
	}
	if opts.Group == nil {
		opts.Group = comm.Single()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Tolerance == 0 {
		opts.Tolerance = 1e-3
	}
	r := &Runner{name: opts.Name, dev: dev, node: node, group: opts.Group, log: opts.Logger, opts: opts,
		eager: map[string][]string{}, static: map[staticKey]*staticBuf{}, buckets: map[BucketKey]*Bucket{},
		warmedSpecs: map[specKey]*warmed{}, warmFailed: map[BucketKey]bool{}, execMem: map[int]*ExecMemory{},
		byWalk: map[string][]*Bucket{}, counters: map[BucketKey]int{}, declare: map[SlotKey][]Row{},
		unreplayed: map[BucketKey]string{}}
	r.nslots = 1
	if node.DoubleBuffer() {
		r.nslots = 2
	}
	for _, c := range configs {
		if err := c.Validate(); err != nil {
			return nil, err
		}
		if blocked := node.Blocked(c); len(blocked) > 0 {
			r.eager[c.Walk] = blocked
			for _, sh := range c.shapes() {
				k := BucketKey{Walk: c.Walk, BatchSize: sh[0], Tokens: sh[1], Key: c.KeyInfo}
				r.unreplayed[k] = "its step uses resources that cannot be captured: " + strings.Join(blocked, ",")
			}
			r.log.Warn("walk runs eager: its step uses resources that cannot be captured",
				"runner", r.name, "walk", c.Walk, "resources", strings.Join(blocked, ","))
			continue
		}
		r.configs = append(r.configs, c)
	}
	r.pad = NewPaddingRows(r.name, node)
	r.tele.init()
	return r, nil
}

// NumSlots is the number of double-buffer slots per bucket.
func (r *Runner) NumSlots() int { return r.nslots }

// Configs are the configs the runner captures (blocked ones excluded).
func (r *Runner) Configs() []*Config { return r.configs }

// eagerWalks lists walks refused because a resource cannot be captured, with
// the resources.
func (r *Runner) eagerWalks() map[string][]string { return r.eager }

// Specs lists every capture, largest first: by batch size, then tokens,
// descending, then config and slot order.
func (r *Runner) Specs() []SlotSpec {
	var specs []SlotSpec
	for ci, c := range r.configs {
		for _, sh := range c.shapes() {
			for slot := 0; slot < r.nslots; slot++ {
				specs = append(specs, SlotSpec{
					Bucket: BucketKey{Walk: c.Walk, BatchSize: sh[0], Tokens: sh[1], Key: c.KeyInfo},
					Slot:   slot, Config: c, ConfigIdx: ci,
				})
			}
		}
	}
	slices.SortStableFunc(specs, func(a, b SlotSpec) int {
		if a.Bucket.BatchSize != b.Bucket.BatchSize {
			return b.Bucket.BatchSize - a.Bucket.BatchSize
		}
		return b.Bucket.Tokens - a.Bucket.Tokens
	})
	return specs
}

// Prepare claims the buffers every capture of this runner will read: the
// streams, the pool, and the node's graph buffers for all specs. Every runner
// of an engine prepares before any captures, since nodes share resources and
// a later build must not move a buffer an earlier graph recorded.
func (r *Runner) Prepare() ([]SlotSpec, error) {
	if r.prepared {
		return r.specs, nil
	}
	var err error
	if r.opts.Stream != nil {
		r.stream = r.opts.Stream
	} else if r.stream, err = r.dev.NewStream(); err != nil {
		return nil, err
	}
	if r.plan, err = r.dev.NewStream(); err != nil {
		return nil, err
	}
	if r.opts.Pool != nil {
		r.pool = r.opts.Pool
	} else {
		if r.pool, err = r.dev.NewPool(); err != nil {
			return nil, err
		}
		r.ownPool = true
	}
	if r.stager, err = accel.NewStager(r.dev, 8, 4096); err != nil {
		return nil, err
	}
	r.specs = r.Specs()
	if err := r.node.BuildGraphBuffers(r.specs); err != nil {
		return nil, fmt.Errorf("graph: %s: build graph buffers: %w", r.name, err)
	}
	r.prepared = true
	return r.specs, nil
}

// Stream is the stream the runner captures and replays on.
func (r *Runner) Stream() accel.Stream { return r.stream }

// PlanStream is the dedicated pre-planning stream. Pre-plan must never submit
// onto the replay stream: whether its copies landed before or after the
// previous step's completion event would depend on timing. A plan-done event
// gates the replay that reads what it wrote.
func (r *Runner) PlanStream() accel.Stream { return r.plan }

// Pool is the runner's graph pool.
func (r *Runner) Pool() accel.Pool { return r.pool }

// Capture warms up and captures every spec (planned nil) or the planned
// buckets, then registers the buckets that every rank captured whole. It
// returns ErrGraphsRequired when a bucket was dropped and the require switch
// is on; other failures drop buckets and are logged, never returned.
func (r *Runner) Capture(ctx context.Context, planned map[BucketKey]bool) error {
	if _, err := r.Prepare(); err != nil {
		return err
	}
	// The executables measured on are given back now, for the captured
	// graphs' executables to reuse.
	r.releaseExecCopies()
	type result struct {
		slots []*Slot
		ok    bool
		why   string
		cfg   *Config
		ci    int
	}
	results := map[BucketKey]*result{}
	var order []BucketKey // candidates in config order, identical on every rank
	if planned != nil {
		r.LeaveOut(planned, nil) // every bucket the loop below skips
	}
	for ci, c := range r.configs {
		for _, sh := range c.shapes() {
			k := BucketKey{Walk: c.Walk, BatchSize: sh[0], Tokens: sh[1], Key: c.KeyInfo}
			if planned != nil && !planned[k] {
				continue
			}
			if _, dup := results[k]; dup {
				return fmt.Errorf("graph: %s: two configs declare bucket %v", r.name, k)
			}
			results[k] = &result{slots: make([]*Slot, r.nslots), ok: true, cfg: c, ci: ci}
			order = append(order, k)
		}
	}
	total := 0
	for _, spec := range r.specs {
		if results[spec.Bucket] != nil {
			total++
		}
	}
	done := 0
	for _, spec := range r.specs {
		res := results[spec.Bucket]
		if res == nil {
			continue
		}
		var capErr error
		if res.ok {
			slot, err := r.captureSpec(spec)
			capErr = err
			if err != nil {
				res.ok = false
				res.why = err.Error()
				r.log.Error("accelerator graph capture failed", "runner", r.name, "bucket", spec.Bucket.String(),
					"slot", spec.Slot, "err", err)
			} else {
				res.slots[spec.Slot] = slot
			}
		}
		done++
		if r.opts.Progress != nil {
			r.opts.Progress(done, total, spec, capErr)
		}
		// Every rank meets this barrier whether its capture passed or failed,
		// so barrier counts never diverge.
		if err := r.group.Barrier(ctx); err != nil {
			return fmt.Errorf("graph: %s: barrier after %v: %w", r.name, spec, err)
		}
	}
	if err := r.pad.ReleaseAll(); err != nil {
		return fmt.Errorf("graph: %s: release padding rows: %w", r.name, err)
	}
	// Specs sizing warmed that the plan left out give their outputs back.
	for k, w := range r.warmedSpecs {
		r.freeOutputs(w.slot)
		delete(r.warmedSpecs, k)
	}
	flags := make([]int64, len(order))
	for i, k := range order {
		res := results[k]
		if res.ok && !slices.Contains(res.slots, nil) {
			flags[i] = 1
		} else if res.ok {
			res.ok, res.why = false, "a slot was not captured"
		}
	}
	agreed, err := comm.Agree(ctx, r.group, flags, comm.Min)
	if err != nil {
		return fmt.Errorf("graph: %s: agree on buckets: %w", r.name, err)
	}
	r.mu.Lock()
	var dropped []string
	for i, k := range order {
		res := results[k]
		if agreed[i] == 1 {
			r.register(&Bucket{Key: k, Config: res.cfg, ConfigIdx: res.ci, Slots: res.slots})
			continue
		}
		why := res.why
		if flags[i] == 1 {
			why = "dropped on another rank"
		}
		for _, s := range res.slots {
			if s != nil {
				s.destroy()
				r.freeOutputs(s)
			}
		}
		r.dropped = append(r.dropped, k)
		r.unreplayed[k] = "capture dropped: " + why
		dropped = append(dropped, k.String())
		r.log.Error("accelerator graph bucket dropped; it will run eager", "runner", r.name, "bucket", k.String(), "reason", why)
	}
	r.mu.Unlock()
	if len(dropped) > 0 {
		r.log.Error("accelerator graph buckets dropped", "runner", r.name, "count", len(dropped), "buckets", strings.Join(dropped, " "))
	}
	if r.opts.RequireGraphs {
		return RequiredError(r.Unreplayed())
	}
	return nil
}

// leftOut is why a bucket the capture plan did not choose will not replay.
const leftOut = "left out by the capture plan: the memory budget does not hold it"

// LeaveOut records that a plan chose only planned: every other declared
// bucket will not replay (Unreplayed), for the reason why gives (the plan's
// CapturePlan.Why; nil or missing: the budget did not hold it). Capture does
// this itself; background capture, which captures bucket by bucket, calls it
// once it has planned. A reason already recorded stays.
func (r *Runner) LeaveOut(planned map[BucketKey]bool, why map[BucketKey]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sp := range r.specs {
		k := sp.Bucket
		if _, live := r.buckets[k]; live || planned[k] {
			continue
		}
		if _, known := r.unreplayed[k]; known {
			continue
		}
		r.unreplayed[k] = leftOut
		if w := why[k]; w != "" {
			r.unreplayed[k] = "left out by the capture plan: " + w
		}
	}
}

// Unreplayed lists every declared bucket that will not replay, and why,
// sorted by walk, then largest first. A bucket not captured yet (background
// capture still to come to it) is not listed.
func (r *Runner) Unreplayed() []Unreplayed {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Unreplayed, 0, len(r.unreplayed))
	for k, why := range r.unreplayed {
		out = append(out, Unreplayed{Runner: r.name, Bucket: k, Reason: why})
	}
	slices.SortFunc(out, func(a, b Unreplayed) int { return byWalkLargest(a.Bucket, b.Bucket) })
	return out
}

// byWalkLargest orders buckets by walk, then largest first (batch size,
// tokens, key info).
func byWalkLargest(a, b BucketKey) int {
	if a.Walk != b.Walk {
		return strings.Compare(a.Walk, b.Walk)
	}
	if a.BatchSize != b.BatchSize {
		return b.BatchSize - a.BatchSize
	}
	if a.Tokens != b.Tokens {
		return b.Tokens - a.Tokens
	}
	return strings.Compare(a.Key, b.Key)
}

// register makes a captured bucket leasable under its capture walk and every
// alias. Call with r.mu held.
func (r *Runner) register(b *Bucket) {
	r.buckets[b.Key] = b
	for _, w := range b.Config.Walks() {
		r.byWalk[w] = append(r.byWalk[w], b)
	}
}

func compareBytes(got, want []byte, dt accel.DType, exact bool, tol float64) (int, bool) {
	if len(got) != len(want) {
		return 0, false
	}
	if exact || dt != accel.F32 {
		for i := range got {
			if got[i] != want[i] {
				return i / int(dt.Size()), false
			}
		}
		return 0, true
	}
	g, w := accel.BytesF32(got), accel.BytesF32(want)
	for i := range g {
		a, b := float64(g[i]), float64(w[i])
		// An infinity matches only itself: the relative bound below would
		// be infinite and let it match any number.
		inf := (math.IsInf(a, 0) || math.IsInf(b, 0)) && a != b
		if inf || math.IsNaN(a) != math.IsNaN(b) || math.Abs(a-b) > tol*math.Max(1, math.Max(math.Abs(a), math.Abs(b))) {
			return i, false
		}
	}
	return 0, true
}

// sortedNames is a map's keys in order.
func sortedNames(m map[string]accel.Tensor) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func mapValues(m map[string]accel.Tensor) []accel.Tensor {
	names := sortedNames(m)
	out := make([]accel.Tensor, len(names))
	for i, n := range names {
		out[i] = m[n]
	}
	return out
}

func (s *Slot) destroy() {
	if s.exec != nil {
		s.exec.Destroy()
	}
	if s.graph != nil {
		s.graph.Destroy()
	}
}

// droppedKeys lists the buckets that failed to capture on some rank.
func (r *Runner) droppedKeys() []BucketKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.dropped)
}

// Buckets lists the registered buckets by capture key, largest first.
func (r *Runner) Buckets() []BucketKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []BucketKey
	for k := range r.buckets {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, byWalkLargest)
	return ks
}

// lookupBucket returns a registered bucket.
func (r *Runner) lookupBucket(k BucketKey) *Bucket {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buckets[k]
}

// Close waits for the runner's streams, destroys every graph and frees the
// runner's buffers and pool.
func (r *Runner) Close() {
	if r.stager != nil {
		r.stager.Close()
	}
	if r.stream != nil && r.opts.Stream == nil {
		r.stream.Close()
	}
	if r.plan != nil {
		r.plan.Close()
	}
	r.mu.Lock()
	for _, b := range r.buckets {
		for _, s := range b.Slots {
			s.destroy()
			r.freeOutputs(s)
		}
	}
	r.buckets, r.byWalk = map[BucketKey]*Bucket{}, map[string][]*Bucket{}
	r.mu.Unlock()
	for k, w := range r.warmedSpecs {
		r.freeOutputs(w.slot)
		delete(r.warmedSpecs, k)
	}
	r.releaseExecCopies()
	for k, sb := range r.static {
		_ = r.dev.Free(sb.buf)
		delete(r.static, k)
	}
	if r.ownPool && r.pool != nil {
		r.pool.Release()
	}
}
