package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/comm"
	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
	"github.com/reprise-ml/reprise/model/llama"
)

// faultAt names one forward of a decode bucket's slot: its n-th warm-up
// (capturing false) or its n-th capture (capturing true), counted from 1.
type faultAt struct {
	bs, slot  int
	capturing bool
	n         int
}

// faultModel is llama whose decode forward fails (an error) or diverges (a
// graph that computes something else than the eager step it was warmed as,
// so its golden check fails) at one forward.
type faultModel struct {
	*llama.Model
	at      faultAt
	diverge bool

	mu     sync.Mutex
	counts map[faultAt]int
	hit    bool
}

var errInjected = errors.New("injected fault")

func (m *faultModel) Forward(l *accel.Launcher, b *engine.Batch) (map[string]accel.Tensor, error) {
	if b.Lease == nil || b.Walk != engine.WalkDecode {
		return m.Model.Forward(l, b)
	}
	k := faultAt{bs: b.Lease.Bucket.BatchSize, slot: b.Lease.Slot, capturing: l.Stream().Capturing()}
	m.mu.Lock()
	m.counts[k]++
	k.n = m.counts[k]
	fire := k == m.at
	m.hit = m.hit || fire
	m.mu.Unlock()
	if fire && !m.diverge {
		return nil, fmt.Errorf("decode bs=%d slot %d: %w", k.bs, k.slot, errInjected)
	}
	outs, err := m.Model.Forward(l, b)
	if fire && err == nil {
		// No token id is negative: the replay's "next" differs from eager.
		l.FillI32(outs[engine.OutputNext], -7)
	}
	return outs, err
}

func (m *faultModel) fired() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hit
}

// Two ranks, each an engine on its own CPU device, start (size, plan,
// capture) and serve with a failure injected on one rank at each point of
// issue 19 item 1: a warm-up of a bucket's second slot, the throwaway capture
// that sizes the largest bucket, a capture, a golden check, and the
// throwaway capture of a lent bucket when a peer wants lent buckets
// measured. No rank waits for ever: both meet the same collectives, keep the
// same graphs (the failed bucket on neither), and serve the same tokens.
func TestRanksStartAndServeWithAFault(t *testing.T) {
	decode := func(bs int) graph.BucketKey {
		return graph.BucketKey{Walk: engine.WalkDecode, BatchSize: bs, Tokens: bs}
	}
	cases := []struct {
		name    string
		at      faultAt
		diverge bool
		// tight: rank 0's plan has no room for graphs, so it wants its lent
		// buckets measured (and, agreed, no rank captures).
		tight   bool
		dropped graph.BucketKey
	}{
		{"warm-up", faultAt{bs: 4, slot: 0, n: 1}, false, false, decode(4)},
		{"throwaway capture", faultAt{bs: 4, slot: 0, capturing: true, n: 1}, false, false, decode(4)},
		{"capture", faultAt{bs: 2, slot: 1, capturing: true, n: 1}, false, false, decode(2)},
		{"golden check", faultAt{bs: 1, slot: 1, capturing: true, n: 1}, true, false, decode(1)},
		{"lent sizing", faultAt{bs: 1, slot: 0, capturing: true, n: 1}, false, true, decode(1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const ranks = 2
			group := comm.NewLocal(ranks)
			es := make([]*engine.Engine, ranks)
			var faulty *faultModel
			for i := range es {
				dev := openCPU(t)
				m, _, err := llama.Open(dev, llama.Source{}, llama.Options{DecodeBatchSizes: []int{1, 2, 4},
					PrefillLengths: []int{}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(m.Close)
				var em engine.Model = m
				if i == 1 {
					faulty = &faultModel{Model: m, at: tc.at, diverge: tc.diverge, counts: map[faultAt]int{}}
					em = faulty
				}
				opts := engine.Options{Graphs: true, MaxBatch: 4, PlanCache: "off", Group: group[i]}
				if tc.tight && i == 0 {
					opts.MemoryFraction = 1e-6
				}
				if es[i], err = engine.New(dev, em, opts); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(es[i].Close)
			}
			// A rank left at a collective its peer skipped fails the test
			// when the context ends; anything else that blocks fails it at
			// the watchdog.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs := make([]error, ranks)
			toks := make([][]int32, ranks)
			done := make(chan struct{})
			go func() {
				defer close(done)
				var wg sync.WaitGroup
				for i := range es {
					wg.Go(func() {
						if errs[i] = es[i].Start(ctx); errs[i] != nil {
							cancel()
							return
						}
						toks[i], _, errs[i] = es[i].Generate(ctx, engine.Request{Prompt: []int32{1, 403, 407}, MaxTokens: 6, IgnoreEOS: true})
					})
				}
				wg.Wait()
			}()
			select {
			case <-done:
			case <-time.After(40 * time.Second):
				t.Fatal("the ranks hung")
			}
			for i, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", i, err)
				}
			}
			if !faulty.fired() {
				t.Errorf("the fault at %+v was never reached", tc.at)
			}
			if group[0].Collectives() != group[1].Collectives() {
				t.Errorf("rank 0 met %d collectives, rank 1 %d", group[0].Collectives(), group[1].Collectives())
			}
			if t.Failed() {
				return
			}
			var live [ranks][]graph.BucketKey
			for i, e := range es {
				live[i] = e.Runners()["graphs"].Buckets()
				if slices.Contains(live[i], tc.dropped) {
					t.Errorf("rank %d kept %v, which failed on rank 1", i, tc.dropped)
				}
			}
			if !slices.Equal(live[0], live[1]) {
				t.Errorf("rank 0 keeps %v, rank 1 %v", live[0], live[1])
			}
			if !tc.tight && len(live[0]) != 2 {
				t.Errorf("the ranks keep %v: want every decode bucket but %v", live[0], tc.dropped)
			}
			if tc.tight {
				// Every rank measured its lent buckets; rank 1's failed.
				for i, e := range es {
					for _, c := range e.Plan().Pool("graphs").Costs {
						if c.Lender != nil {
							t.Errorf("rank %d: %v still costed from %v", i, c.Bucket, *c.Lender)
						}
						if c.Bucket == tc.dropped && c.Plannable() != (i == 0) {
							t.Errorf("rank %d: %v plannable %v after the lent sizing", i, c.Bucket, c.Plannable())
						}
					}
				}
			}
			if len(toks[0]) != 6 || !slices.Equal(toks[0], toks[1]) {
				t.Errorf("rank 0 served %v, rank 1 %v", toks[0], toks[1])
			}
			// The one-row decode steps replay wherever a decode bucket is
			// live (padded up to it), and run eager where none is.
			for i, e := range es {
				var replays int64
				for _, st := range e.Stats().Steps {
					if st.Walk == engine.WalkDecode && st.Replay {
						replays += st.Steps
					}
				}
				if want := len(live[i]) > 0; (replays > 0) != want {
					t.Errorf("rank %d replayed %d decode steps with %v live", i, replays, live[i])
				}
			}
		})
	}
}
