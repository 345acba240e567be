package engine_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
	"github.com/reprise-ml/reprise/model/llama"
)

// captureProbe is a model that, on the first forward it is asked to run
// while the stream captures (the whole step's or a region's, whichever comes
// first), records which per-slot graph buffers the resources do not hold
// yet: for every runner of the engine, every spec and slot it will capture,
// in every resource that runner's steps plan into.
type captureProbe struct {
	*llama.Model
	e *engine.Engine

	checked bool
	// specs counts, by pool, the specs checked; slots, the slots per bucket.
	specs, slots map[string]int
	keys         int      // (spec, resource) pairs checked
	missing      []string // those without a buffer
}

func (p *captureProbe) Forward(l *accel.Launcher, b *engine.Batch) (map[string]accel.Tensor, error) {
	p.check(l)
	return p.Model.Forward(l, b)
}

func (p *captureProbe) RegionForward(l *accel.Launcher, label string, b *engine.Batch) (map[string]accel.Tensor, error) {
	p.check(l)
	return p.Model.RegionForward(l, label, b)
}

// check runs once, on the first forward called on a capturing stream. The
// runners warm up and capture on Start's goroutine, which owns the resources
// until the loop starts, so reading their buffer maps (and the runners'
// specs) here races with nothing.
func (p *captureProbe) check(l *accel.Launcher) {
	if p.checked || !l.Stream().Capturing() {
		return
	}
	p.checked = true
	p.specs, p.slots = map[string]int{}, map[string]int{}
	built := map[graph.SlotKey]bool{}
	for _, ks := range p.e.SlotBufferKeys() {
		for _, k := range ks {
			built[k] = true
		}
	}
	resources := p.e.RunnerResources()
	for pool, r := range p.e.Runners() {
		p.slots[pool] = r.NumSlots()
		for _, sp := range r.Specs() {
			p.specs[pool]++
			for _, res := range resources[pool] {
				if res == engine.PenaltiesName && !engine.KeyHas(sp.Bucket.Key, engine.KeyPenalties) {
					continue // it plans only into the buckets of its variant
				}
				p.keys++
				if k := (graph.SlotKey{Bucket: sp.Bucket, Slot: sp.Slot, Label: res}); !built[k] {
					p.missing = append(p.missing, fmt.Sprintf("%s: %v in %s", pool, sp, res))
				}
			}
		}
	}
}

// Every runner builds its graph buffers, for every spec and slot and in
// every resource its steps plan into, before any runner captures (design
// invariant 2): a buffer built later could land where an earlier graph's
// pool or outputs were, and a graph reads the addresses it recorded. The
// model checks the resources' buffers at the first forward it runs on a
// capturing stream, in an engine with a whole-step runner (decode) and a
// region runner (the piecewise prefill's block loop), both double-buffered.
func TestSlotBuffersBuiltBeforeFirstCapture(t *testing.T) {
	dev := openCPU(t)
	mo := testModel
	mo.PenaltyGraphs = true // a variant whose resource plans only into its own buckets
	m, _, err := llama.Open(dev, llama.Source{}, mo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if len(m.Regions()) == 0 {
		t.Fatal("the test model declares no region: the test needs a piecewise prefill")
	}
	p := &captureProbe{Model: m}
	e, err := engine.New(dev, p, engine.Options{Graphs: true, PlanCache: "off"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	p.e = e
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}

	if !p.checked {
		t.Fatal("Start captured graphs, yet the model never ran a forward on a capturing stream")
	}
	pools := slices.Sorted(maps.Keys(p.specs))
	if want := []string{llama.RegionBlocks, "graphs"}; !slices.Equal(pools, want) {
		t.Fatalf("at the first capture the runners were %v, want %v", pools, want)
	}
	for _, pool := range pools {
		if p.slots[pool] != 2 || p.specs[pool] == 0 {
			t.Fatalf("runner %s: %d specs of %d slots; the test needs double-buffered buckets", pool, p.specs[pool], p.slots[pool])
		}
	}
	if len(p.missing) > 0 {
		t.Fatalf("at the first capture %d of %d (spec, resource) buffers were not built yet:\n%s",
			len(p.missing), p.keys, strings.Join(p.missing, "\n"))
	}
	if e.LiveBuckets() == 0 {
		t.Fatal("no bucket went live")
	}
}
