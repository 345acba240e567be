package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/reprise-ml/reprise/engine"
	"github.com/reprise-ml/reprise/graph"
)

func init() {
	register(command{name: "plan", summary: "size and plan graph captures under the device's memory budget", run: runPlan})
}

// planOutput is `reprise plan --json`'s output. Bytes throughout.
type planOutput struct {
	Model  string `json:"model"`
	Device string `json:"device"`
	// Budget is the memory the plan had to fit in: the memory fraction of
	// the device less what weights and KV cache already hold.
	Budget int64 `json:"budget"`
	// Floor is the largest eager step: what stays free beside the graphs.
	Floor int64 `json:"floor"`
	// Predicted is the chosen graphs' memory: pools plus outside.
	Predicted int64 `json:"predicted"`
	// PredictedPool is the pools' share of Predicted.
	PredictedPool int64 `json:"predicted_pool"`
	// Reserve is the rest of the segments the chosen outputs open, kept free
	// beside the floor (only small requests can use it).
	Reserve int64 `json:"reserve"`
	// Actual and ActualPool are what capture took (--capture only).
	Actual     int64 `json:"actual,omitempty"`
	ActualPool int64 `json:"actual_pool,omitempty"`
	// FromCache: every pool's costs came from the plan cache.
	FromCache bool         `json:"from_cache"`
	Buckets   []planBucket `json:"buckets"`
}

// planBucket is one bucket's measured cost and whether it was chosen.
type planBucket struct {
	graph.CaptureCost
	Name   string `json:"name"`
	Pool   string `json:"pool"` // the graph pool the bucket captures into
	Chosen bool   `json:"chosen"`
	Why    string `json:"why_not,omitempty"`
}

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("plan", stderr)
	var df deviceFlags
	df.register(fs, true)
	asJSON := fs.Bool("json", false, "print JSON (fields documented in docs/PLANNING.md)")
	capture := fs.Bool("capture", false, "also capture the plan and print what it took")
	cache := fs.String("plan-cache", "", "directory of measured capture costs (default $"+envPlanCache+" or the user cache; off disables)")
	seed := fs.Uint64("seed", 1, "seed of a synthetic model's weights")
	if err := parse(fs, args); err != nil {
		return err
	}
	df.model.Seed = *seed
	s, err := df.openSession(stderr, nil, engine.Options{Graphs: true, PlanCache: *cache})
	if err != nil {
		return err
	}
	defer s.Close()
	e, m, dev := s.eng, s.model, s.dev
	var rep *engine.PlanReport
	if *capture {
		if err := e.Start(ctx); err != nil {
			return err
		}
		rep = e.Plan()
	} else if rep, err = e.DryPlan(ctx); err != nil {
		return err
	}
	out := planOutput{Model: m.Info().Name, Device: dev.Info().String(), Budget: rep.Plan.Free, Floor: rep.Plan.Floor,
		Predicted: rep.Plan.Total(), Reserve: rep.Plan.Reserve, FromCache: true}
	for _, v := range rep.Plan.Predicted {
		out.PredictedPool += v
	}
	counted := map[string]bool{} // runners sharing a graph pool report all of it
	for _, p := range rep.Pools {
		out.FromCache = out.FromCache && p.FromCache
		if *capture {
			if !counted[p.Pool] {
				counted[p.Pool] = true
				out.ActualPool += p.Actual
				out.Actual += p.Actual
			}
			out.Actual += p.ActualOutside
		}
		for _, c := range p.Costs {
			out.Buckets = append(out.Buckets, planBucket{CaptureCost: c, Name: c.Bucket.String(), Pool: p.Name,
				Chosen: rep.Plan.Chosen(p.Pool, c.Bucket), Why: rep.Why[c.Bucket.String()]})
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printPlan(stdout, out)
	return nil
}

func printPlan(w io.Writer, p planOutput) {
	fmt.Fprintf(w, "plan for %s on %s (costs %s)\n\n", p.Model, p.Device, map[bool]string{true: "from the plan cache", false: "measured"}[p.FromCache])
	// The bucket column is as wide as its longest name
	// (prefill.blocks[bs=8,tokens=512,key=] and longer).
	nameW := len("bucket")
	for _, b := range p.Buckets {
		nameW = max(nameW, len(b.Name))
	}
	fmt.Fprintf(w, "%-*s %10s %10s %10s %10s %6s  %s\n", nameW, "bucket", "peak", "graph", "outside", "exec", "slots", "chosen")
	bs := slices.Clone(p.Buckets)
	for _, b := range bs {
		chosen := "yes"
		if !b.Chosen {
			chosen = "no: " + b.Why
		}
		graphCol := humanBytes(b.Graph)
		if b.Graph < 0 {
			graphCol = "-"
		} else if b.Lender != nil {
			graphCol += "*"
		}
		fmt.Fprintf(w, "%-*s %10s %10s %10s %10s %6d  %s\n", nameW, b.Name, humanBytes(b.Peak), graphCol,
			humanBytes(b.Outside), humanBytes(b.Executable), b.Slots, chosen)
	}
	fmt.Fprintf(w, "\n* costed from a larger bucket's throwaway capture\n")
	fmt.Fprintf(w, "budget %s, floor (largest eager step) %s, predicted %s (pool %s)\n",
		humanBytes(p.Budget), humanBytes(p.Floor), humanBytes(p.Predicted), humanBytes(p.PredictedPool))
	if p.ActualPool > 0 || p.Actual > 0 {
		fmt.Fprintf(w, "captured: %s (pool %s)\n", humanBytes(p.Actual), humanBytes(p.ActualPool))
	}
}
