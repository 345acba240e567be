package engine

import (
	"sync/atomic"
	"time"
)

// requestTimes are the moments of a request's life the loop records and
// the server reads (for its request log and latency metrics), from any
// goroutine.
type requestTimes struct {
	admitted atomic.Int64 // unix ns the scheduler admitted it into a prefill (0: not yet)
}

// Admitted is when the scheduler took the request from the queue into a
// prefill step, the zero time while it waits. The time from Submit to it
// is the request's queue time; from it to the first token, its prefill.
func (h *Handle) Admitted() time.Time {
	ns := h.r.times.admitted.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
