package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/comm"
	"github.com/reprise-ml/reprise/graph"
)

// planCacheVersion changes whenever what is measured or how changes.
const planCacheVersion = 2

// PlanReport is what planning decided, for logs and `reprise plan`.
type PlanReport struct {
	Plan  graph.CapturePlan `json:"plan"`
	Pools []PoolReport      `json:"pools"`
	Why   map[string]string `json:"why_not"`
	// Reusable is the executable memory held by the copies sizing measured
	// on, which the captured graphs' executables reuse (Plan's reusable).
	Reusable int64 `json:"reusable"`
}

// PoolReport is one graph pool's costs and outcome.
type PoolReport struct {
	// Name is the runner's: "graphs" for the whole-step captures, a
	// region's label for its.
	Name string `json:"pool"`
	// Pool is the graph pool the runner captures into, and the plan's key
	// for it: the regions share the forward's ("graphs").
	Pool      string              `json:"graph_pool"`
	Costs     []graph.CaptureCost `json:"costs"`
	FromCache bool                `json:"from_cache"`
	CacheFile string              `json:"cache_file,omitempty"`
	// Actual is the graph pool's memory after capture (0 before); runners
	// sharing a pool each report all of it.
	Actual int64 `json:"actual_pool"`
	// ActualOutside is what the captured graphs hold outside the pool.
	ActualOutside int64 `json:"actual_outside"`

	runner  *graph.Runner
	planned map[graph.BucketKey]bool
	key     string // the plan cache key of the pool's costs
}

// Buckets is the number of buckets costed.
func (r *PlanReport) Buckets() int {
	n := 0
	for _, p := range r.Pools {
		n += len(p.Costs)
	}
	return n
}

// Pool returns a pool's report.
func (r *PlanReport) Pool(name string) *PoolReport {
	for i := range r.Pools {
		if r.Pools[i].Name == name {
			return &r.Pools[i]
		}
	}
	return nil
}

// planBudget is the memory a plan may use: the device memory fraction of the
// total, less what is already in use (the allocator's cache counts as free:
// it is given back on demand).
func (e *Engine) planBudget() int64 {
	mi := e.dev.MemInfo()
	st := e.dev.Allocator().Stats()
	cached := (st.Reserved - st.PoolReserved) - (st.Allocated - st.PoolAllocated)
	used := mi.Total - mi.Free - cached
	frac := e.opts.MemoryFraction
	if frac <= 0 || frac > 1 {
		frac = 0.9
	}
	return int64(frac*float64(mi.Total)) - used
}

// plan sizes each pool's buckets (or reads them from the plan cache), plans
// them together, and agrees with the other ranks on what each runner
// captures.
func (e *Engine) plan(ctx context.Context, pools []pool) (*PlanReport, error) {
	rep := &PlanReport{Why: map[string]string{}}
	costs := map[string]map[graph.BucketKey]graph.CaptureCost{}
	// Ranks use cached costs only if every rank has them: a rank that sizes
	// meets barriers a rank reading its cache would not.
	cached := make([]map[graph.BucketKey]graph.CaptureCost, len(pools))
	hits := make([]int64, len(pools))
	for i, p := range pools {
		c, ok := loadPlanCache(e.planCacheFile(e.planKey(p.runner)), e.planKey(p.runner))
		if ok {
			cached[i], hits[i] = c, 1
		}
	}
	group := e.opts.Group
	if group == nil {
		group = comm.Single()
	}
	agreed, err := comm.Agree(ctx, group, hits, comm.Min)
	if err != nil {
		return nil, fmt.Errorf("engine: agree on the plan cache: %w", err)
	}
	for i, p := range pools {
		pr := PoolReport{Name: p.name, Pool: p.graphPool, runner: p.runner, key: e.planKey(p.runner)}
		pr.CacheFile = e.planCacheFile(pr.key)
		c, ok := cached[i], agreed[i] == 1
		if hits[i] == 1 && !ok {
			e.log.Info("plan cache hit unused: another rank has no cached costs, every rank sizes", "pool", p.name)
		}
		if ok {
			pr.FromCache = true
			e.log.Info("capture costs from the plan cache", "pool", p.name, "file", pr.CacheFile)
		} else {
			var err error
			if c, err = p.runner.Size(ctx); err != nil {
				return nil, err
			}
		}
		costs[p.name] = c
		rep.Pools = append(rep.Pools, pr)
	}
	// The budget is read once sizing is done, so that what it holds is
	// seen: the warmed outputs (which the plan charges, so they are given
	// back here) and the executables measured on, which the captured graphs'
	// executables reuse once they are released (the reusable term).
	budget := e.planBudget()
	var reusable int64
	for _, p := range pools {
		budget += p.runner.WarmedOutputs()
		reusable += p.runner.ExecHeld()
	}
	rep.Reusable = reusable
	// The plan keeps its floor (the largest warmed step) free; the largest
	// eager step Start measured may be larger still (its buckets' warm-ups
	// may have failed, or no bucket is as large): keep that free too.
	var warmedFloor int64
	for _, cs := range costs {
		for _, c := range cs {
			warmedFloor = max(warmedFloor, c.Peak)
		}
	}
	budget -= max(0, e.floor-warmedFloor)
	plan := graph.Plan(byPool(pools, costs), budget, reusable)
	// When the plan leaves graphs out, buckets costed from a larger one are
	// measured for their own cost and the plan is made again. Every rank
	// calls SizeLent once per runner, wanting or not, so that the ranks size
	// again together or not at all.
	resized := false
	for i, p := range pools {
		lent := false
		for _, c := range costs[p.name] {
			if c.Lender != nil && c.Plannable() && !plan.Chosen(p.graphPool, c.Bucket) {
				lent = true
			}
		}
		sized, err := p.runner.SizeLent(ctx, costs[p.name], lent)
		if err != nil {
			return nil, err
		}
		if sized.Resized {
			costs[p.name], resized = sized.Costs, true
		}
		if pr := &rep.Pools[i]; !pr.FromCache || sized.Resized {
			if err := savePlanCache(pr.CacheFile, pr.key, costs[p.name]); err != nil {
				e.log.Warn("plan cache not written", "file", pr.CacheFile, "err", err)
			}
		}
	}
	if resized {
		plan = graph.Plan(byPool(pools, costs), budget, reusable)
	}
	rep.Plan = plan
	for k, why := range plan.Why {
		rep.Why[k.String()] = why
	}
	for i, p := range pools {
		planned := map[graph.BucketKey]bool{}
		for _, k := range plan.Buckets[p.graphPool] {
			if _, ok := costs[p.name][k]; ok {
				planned[k] = true
			}
		}
		agreed, err := p.runner.AgreePlan(ctx, planned)
		if err != nil {
			return nil, err
		}
		pr := &rep.Pools[i]
		pr.planned = agreed
		for _, c := range costs[p.name] {
			pr.Costs = append(pr.Costs, c)
		}
		sort.Slice(pr.Costs, func(a, b int) bool {
			x, y := pr.Costs[a].Bucket, pr.Costs[b].Bucket
			if x.Walk != y.Walk {
				return x.Walk < y.Walk
			}
			if x.BatchSize != y.BatchSize {
				return x.BatchSize > y.BatchSize
			}
			return x.Tokens > y.Tokens
		})
	}
	return rep, nil
}

// byPool merges the runners' costs by the graph pool they capture into: a
// pool's graphs, whichever runner captures them, share its memory.
func byPool(pools []pool, costs map[string]map[graph.BucketKey]graph.CaptureCost) map[string]map[graph.BucketKey]graph.CaptureCost {
	out := map[string]map[graph.BucketKey]graph.CaptureCost{}
	for _, p := range pools {
		m := out[p.graphPool]
		if m == nil {
			m = map[graph.BucketKey]graph.CaptureCost{}
			out[p.graphPool] = m
		}
		for k, c := range costs[p.name] {
			m[k] = c
		}
	}
	return out
}

// planKey is what the measured costs depend on: the model's shapes and
// storage, the device, the graph configs and the engine's layout.
func (e *Engine) planKey(r *graph.Runner) string {
	type cfgKey struct {
		Walk, Key string
		Batch     []int
		Tokens    []int
		PerRow    int
		Mult      int
		SeqAxis   map[string]int
	}
	var cfgs []cfgKey
	for _, c := range r.Configs() {
		k := cfgKey{Walk: c.Walk, Key: c.KeyInfo, Batch: c.BatchSizes, SeqAxis: c.SeqAxis, Mult: c.Multiplier()}
		if c.Batched != nil {
			k.PerRow = c.Batched.TokensPerRow
		} else {
			k.Tokens = c.Packed.TokenLengths
		}
		cfgs = append(cfgs, k)
	}
	info := e.dev.Info()
	b, _ := json.Marshal(struct {
		Version  int
		Model    ModelInfo
		Backend  string
		Device   string
		Cap      accel.Capability
		Configs  []cfgKey
		Slots    int
		PageSize int
		Pages    int
		Golden   bool
	}{planCacheVersion, e.info, info.Backend, info.Name, e.dev.Capability(), cfgs, r.NumSlots(),
		e.opts.PageSize, e.kv.Config().Pages, !e.opts.Runner.NoGoldenCheck})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

func (e *Engine) planCacheFile(key string) string {
	dir := e.opts.PlanCache
	if dir == "off" {
		return ""
	}
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(base, "reprise", "plans")
	}
	return filepath.Join(dir, key+".json")
}

type planCache struct {
	Key   string              `json:"key"`
	Costs []graph.CaptureCost `json:"costs"`
}

func loadPlanCache(file, key string) (map[graph.BucketKey]graph.CaptureCost, bool) {
	if file == "" {
		return nil, false
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, false
	}
	var pc planCache
	if json.Unmarshal(b, &pc) != nil || pc.Key != key || len(pc.Costs) == 0 {
		return nil, false
	}
	out := map[graph.BucketKey]graph.CaptureCost{}
	for _, c := range pc.Costs {
		out[c.Bucket] = c
	}
	return out, true
}

func savePlanCache(file, key string, costs map[graph.BucketKey]graph.CaptureCost) error {
	if file == "" {
		return nil
	}
	pc := planCache{Key: key}
	for _, c := range costs {
		pc.Costs = append(pc.Costs, c)
	}
	b, err := json.MarshalIndent(pc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// Plan is the last planning's report, nil when the engine did not plan.
func (e *Engine) Plan() *PlanReport { return e.planRep }
