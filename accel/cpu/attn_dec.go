package cpu

// decPrefetchMax (the AVX-512 decode attention path, attn_dec512_amd64.go)
// is the most bytes of a token's keys and values (for the heads of its
// piece) that are fetched a whole token ahead, while the token before it
// computes; tokens of more have their next head's rows fetched while a
// head computes. At 0 (the default) every token takes the second:
// BenchmarkAttentionBatch64 at ctx12 measured the whole-token fetch no
// faster (cold, cpu-ns/item ~695 against ~630 at load ~7), the fetches
// of a token's ~600 lines queueing behind each other. A variable for that
// benchmark ("set-tok" sets 256 KiB: two tokens' in L2's 1 MiB).
var decPrefetchMax = 0
