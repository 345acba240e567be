//go:build race

package llama

// raceEnabled: the race detector slows the kernels ~10x; the heaviest
// fixture checks run a subset under it.
const raceEnabled = true
