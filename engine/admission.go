package engine

// The admission policy, apart from the device and the loop so that table
// tests drive it: which waiting requests join the next prefill, how many
// running requests the next decode carries, and the order they run in after.

// admitLimits bound a prefill step and the requests running together.
type admitLimits struct {
	Rows   int // prompts in one prefill (Options.MaxPrefillRows)
	Batch  int // requests running at once (Options.MaxBatch)
	Tokens int // prompt tokens in one prefill (Options.MaxPrefillTokens)
}

// group is what a waiting request takes once admitted, with the forks it
// opens after its prefill (the other choices of its prompt).
type group struct {
	Prompt    int // prompt tokens in the prefill
	Rows      int // rows of the running batch: the request and its forks
	Pages     int // KV pages the request is promised when it is ingested
	ForkPages int // KV pages its forks are promised when they open
}

// prefillSoFar is a prefill being filled, beside the running requests.
type prefillSoFar struct {
	Running  int // requests running already
	Rows     int // prompts in the prefill
	Tokens   int // their tokens
	ForkRows int // forks its requests open after it, each a running row
	Owed     int // pages those forks will be promised (their requests' own are taken at ingest)
}

// add is the prefill with g admitted (and its request ingested, which
// takes g.Pages from the cache's free pages).
func (p prefillSoFar) add(g group) prefillSoFar {
	p.Rows++
	p.Tokens += g.Prompt
	p.ForkRows += g.Rows - 1
	p.Owed += g.ForkPages
	return p
}

// admitHead reports whether the oldest waiting request's group g joins
// the prefill p, with free pages the cache can still promise. Requests are
// admitted oldest first and the first refused stops admission: a group the
// cache cannot promise its pages to waits (backpressure), and so does
// everyone behind it.
func admitHead(l admitLimits, free int, p prefillSoFar, g group) bool {
	return p.Rows < l.Rows && p.Running+p.Rows+p.ForkRows+g.Rows <= l.Batch &&
		p.Tokens+g.Prompt <= l.Tokens && p.Owed+g.Pages+g.ForkPages <= free
}

// decodeRows is how many of the running requests (oldest in the rotation
// first) the next decode step carries.
func decodeRows(running, maxBatch int) int { return min(running, maxBatch) }

// rotate is the running requests after a decode of the first n: those past
// the batch first, then the batch's survivors, so that requests beyond
// MaxBatch get their turn.
func rotate[T any](running []T, n int, survivors []T) []T {
	out := append([]T(nil), running[n:]...)
	return append(out, survivors...)
}
