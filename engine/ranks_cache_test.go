package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/comm"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/model/llama"
)

// startRanks starts one engine per rank, each on its own CPU device and with
// its own plan cache directory, together; it returns the engines and each
// rank's Start error.
func startRanks(t *testing.T, caches []string) ([]*engine.Engine, []error) {
	t.Helper()
	group := comm.NewLocal(len(caches))
	es := make([]*engine.Engine, len(caches))
	for i := range caches {
		dev := openCPU(t)
		m, _, err := llama.Open(dev, llama.Source{}, llama.Options{DecodeBatchSizes: []int{1, 2}, PrefillLengths: []int{16}, PrefillBatchSizes: []int{1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		if es[i], err = engine.New(dev, m, engine.Options{Graphs: true, MaxBatch: 2, PlanCache: caches[i], Group: group[i]}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(es[i].Close)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, len(caches))
	var wg sync.WaitGroup
	for i := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = es[i].Start(ctx); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	return es, errs
}

// Ranks agree on using cached costs: when one rank has them and another has
// not, every rank sizes (issue 19, item 2: the ranks met different barriers
// and waited for ever), and the plans agree.
func TestRanksAgreeOnThePlanCache(t *testing.T) {
	warm := t.TempDir()
	if _, errs := startRanks(t, []string{warm, t.TempDir()}); errs[0] != nil || errs[1] != nil {
		t.Fatalf("first start: %v", errs)
	}
	es, errs := startRanks(t, []string{warm, t.TempDir()})
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d with %s: %v", i, map[bool]string{true: "a cached plan", false: "no cached plan"}[i == 0], err)
		}
	}
	if t.Failed() {
		return
	}
	for i, e := range es {
		rep := e.Plan()
		for _, p := range rep.Pools {
			if p.FromCache {
				t.Errorf("rank %d pool %s used its cache while another rank had none", i, p.Name)
			}
		}
		if fmt.Sprint(rep.Plan.Buckets) != fmt.Sprint(es[0].Plan().Plan.Buckets) {
			t.Errorf("rank %d planned %v, rank 0 %v", i, rep.Plan.Buckets, es[0].Plan().Plan.Buckets)
		}
	}
}
