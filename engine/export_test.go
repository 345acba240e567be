package engine

import (
	"context"
	"slices"
)

// OnLoop runs fn on the engine's loop goroutine, between two steps, and
// waits for it: what fn reads of the loop's state is exact, and what it
// submits or cancels is seen by the very next step.
func (e *Engine) OnLoop(ctx context.Context, fn func()) error { return e.do(ctx, fn) }

// PrePlanned is the request ids of the pre-planned next decode step, nil
// when there is none. Call it from OnLoop.
func (e *Engine) PrePlanned() []int64 {
	if e.pre == nil {
		return nil
	}
	return slices.Clone(e.pre.ids)
}
