package engine

// The admission policy, apart from the device and the loop so that table
// tests drive it: which waiting requests join the next prefill, how many
// running requests the next decode carries, and the order they run in after.

// capacity is what admission asks of the KV cache.
type capacity interface {
	// CanHold reports whether a request of maxLen positions could be
	// promised its pages now.
	CanHold(maxLen int) bool
}

// admitLimits bound a prefill step and the requests running together.
type admitLimits struct {
	Rows   int // prompts in one prefill (Options.MaxPrefillRows)
	Batch  int // requests running at once (Options.MaxBatch)
	Tokens int // prompt tokens in one prefill (Options.MaxPrefillTokens)
}

// admitHead reports whether the oldest waiting request, of prompt tokens and
// at most maxLen positions, joins a prefill that holds rows prompts of tokens
// tokens so far, beside running requests. Requests are admitted oldest first
// and the first refused stops admission: a request the cache cannot promise
// its pages to waits (backpressure), and so does everyone behind it.
func admitHead(l admitLimits, c capacity, running, rows, tokens, prompt, maxLen int) bool {
	return rows < l.Rows && running+rows < l.Batch && tokens+prompt <= l.Tokens && c.CanHold(maxLen)
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
