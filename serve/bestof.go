package serve

import (
	"cmp"
	"slices"
)

// best keeps the n choices of the highest cumulative log-probability, best
// first and numbered again from 0 (as vLLM's best_of did); with no more
// choices than n it keeps them all as they are. The ranking is by the raw
// log probabilities the engine reports (before penalties and temperature);
// equal sums keep the candidates' order.
func (g *generation) best(n int) []*choice {
	if len(g.choices) <= n {
		return g.choices
	}
	ranked := slices.Clone(g.choices)
	slices.SortStableFunc(ranked, func(a, b *choice) int { return cmp.Compare(b.cum, a.cum) })
	ranked = ranked[:n]
	for i, c := range ranked {
		c.index = i
	}
	return ranked
}
