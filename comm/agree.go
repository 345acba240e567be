package comm

import (
	"context"
	"fmt"
)

// Reduce combines one value from every rank.
type Reduce func(a, b int64) int64

// Min ANDs flags (1 kept, 0 dropped): what any rank dropped is dropped.
func Min(a, b int64) int64 { return min(a, b) }

// Max takes the largest (e.g. of per-rank costs, or "any rank wants it").
func Max(a, b int64) int64 { return max(a, b) }

// Agree reduces each of values over every rank of g: position i of the result
// is reduce over every rank's values[i]. Callers pass values in an order every
// rank derives alike (from identical configs), so that position i means the
// same thing everywhere; ranks passing vectors of different lengths is an
// error naming the rank.
func Agree(ctx context.Context, g Group, values []int64, reduce Reduce) ([]int64, error) {
	all, err := g.AllGather(ctx, values)
	if err != nil {
		return nil, err
	}
	out := append([]int64(nil), values...)
	for rank, vs := range all {
		if len(vs) != len(values) {
			return nil, fmt.Errorf("comm: rank %d agreed on %d values, this rank on %d: the ranks' configs differ", rank, len(vs), len(values))
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
