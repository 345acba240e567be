package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
)

// EnvPlanCache names the directory where measured capture costs persist
// ("off" disables the cache).
const EnvPlanCache = "REPRISE_PLAN_CACHE"

// planCacheVersion changes whenever what is measured or how changes.
const planCacheVersion = 1

// PlanReport is what planning decided, for logs and `reprise plan`.
type PlanReport struct {
	Pool      string              `json:"pool"`
	Costs     []graph.CaptureCost `json:"costs"`
	Plan      graph.CapturePlan   `json:"plan"`
	Why       map[string]string   `json:"why_not"`
	FromCache bool                `json:"from_cache"`
	CacheFile string              `json:"cache_file,omitempty"`
	// Actual is the pool's memory after capture (0 before).
	Actual int64 `json:"actual_pool"`
	// ActualOutside is what capture took outside the pool.
	ActualOutside int64 `json:"actual_outside"`
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

// plan sizes (or reads the cache), plans and agrees on the buckets to
// capture.
func (e *Engine) plan(ctx context.Context, r *graph.Runner) (map[graph.BucketKey]bool, *PlanReport, error) {
	rep := &PlanReport{Pool: "graphs"}
	key := e.planKey(r)
	file := e.planCacheFile(key)
	costs, ok := loadPlanCache(file, key)
	if ok {
		rep.FromCache = true
		e.log.Info("capture costs from the plan cache", "file", file)
	} else {
		var err error
		if costs, err = r.Size(ctx); err != nil {
			return nil, nil, err
		}
	}
	rep.CacheFile = file
	budget := e.planBudget() + r.WarmedOutputs()
	plan := graph.Plan(map[string]map[graph.BucketKey]graph.CaptureCost{rep.Pool: costs}, budget, 0)
	// When the plan leaves graphs out, buckets costed from a larger one are
	// measured for their own cost and the plan is made again. Every rank
	// takes part in that decision.
	lent := false
	for _, c := range costs {
		if c.Lender != nil && c.Plannable() && !plan.Chosen(rep.Pool, c.Bucket) {
			lent = true
		}
	}
	// Every rank calls SizeLent once, wanting or not, so that they size
	// again together or not at all.
	sized, err := r.SizeLent(ctx, costs, lent)
	if err != nil {
		return nil, nil, err
	}
	if sized.Resized {
		costs = sized.Costs
		plan = graph.Plan(map[string]map[graph.BucketKey]graph.CaptureCost{rep.Pool: costs}, budget, 0)
	}
	if !rep.FromCache || sized.Resized {
		if err := savePlanCache(file, key, costs); err != nil {
			e.log.Warn("plan cache not written", "file", file, "err", err)
		}
	}
	planned := map[graph.BucketKey]bool{}
	for _, k := range plan.Buckets[rep.Pool] {
		planned[k] = true
	}
	planned, err = r.AgreePlan(ctx, planned)
	if err != nil {
		return nil, nil, err
	}
	rep.Plan = plan
	rep.Why = map[string]string{}
	for k, why := range plan.Why {
		rep.Why[k.String()] = why
	}
	for _, c := range costs {
		rep.Costs = append(rep.Costs, c)
	}
	sort.Slice(rep.Costs, func(i, j int) bool {
		a, b := rep.Costs[i].Bucket, rep.Costs[j].Bucket
		if a.Walk != b.Walk {
			return a.Walk < b.Walk
		}
		if a.BatchSize != b.BatchSize {
			return a.BatchSize > b.BatchSize
		}
		return a.Tokens > b.Tokens
	})
	return planned, rep, nil
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
	if dir == "" {
		dir = os.Getenv(EnvPlanCache)
	}
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
