package graph

import (
	"context"
	"fmt"

	"github.com/reprise-ml/reprise/comm"
)

// Reduce combines one value from every rank.
type Reduce func(a, b int64) int64

// Min ANDs flags (1 kept, 0 dropped): a bucket any rank dropped is dropped.
func Min(a, b int64) int64 { return min(a, b) }

// Max takes the largest (e.g. of per-rank costs).
func Max(a, b int64) int64 { return max(a, b) }

// Agree reduces each of values over every rank of g. Callers pass values in
// an order derived from the configs, which are identical on every rank, so
// position i means the same bucket everywhere. Capture failure is per rank:
// a rank that kept a graph another rank dropped would replay it while the
// other ran eager, and hang as soon as the graph holds a collective.
func Agree(ctx context.Context, g comm.Group, values []int64, reduce Reduce) ([]int64, error) {
	all, err := g.AllGather(ctx, values)
	if err != nil {
		return nil, err
	}
	out := append([]int64(nil), values...)
	for rank, vs := range all {
		if len(vs) != len(values) {
			return nil, fmt.Errorf("graph: rank %d agreed on %d values, this rank on %d: the ranks' configs differ", rank, len(vs), len(values))
		}
		if rank == g.Rank() {
			continue
		}
		for i, v := range vs {
			out[i] = reduce(out[i], v)
		}
	}
	return out, nil
}
