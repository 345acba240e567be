package alloc

import (
	"fmt"

	"github.com/reprise-ml/reprise/accel"
)

// Capture is the host side of a stream's capture in progress, the same in
// every backend: the graph pool its allocations come from (the allocator
// routes them there from StartCapture until End or Abort), the nodes the
// stream recorded, of the backend's own type, and the first reason the
// capture cannot make a graph. Only the goroutine that owns the stream
// touches it.
type Capture[N any] struct {
	Pool  *Pool
	Nodes []N

	a      *Caching
	stream int64
	err    error
}

// StartCapture routes stream's allocations to p, which must be a graph pool
// of a, and returns the capture's state.
func StartCapture[N any](a *Caching, stream int64, p accel.Pool) (*Capture[N], error) {
	pool, ok := p.(*Pool)
	if !ok || pool == nil || pool.a != a {
		return nil, fmt.Errorf("alloc: capture into %T, not a pool of this device: %w", p, accel.ErrInvalidArgument)
	}
	if err := a.BeginCapture(stream, pool); err != nil {
		return nil, err
	}
	return &Capture[N]{Pool: pool, a: a, stream: stream}, nil
}

// Invalidate records err as the reason the capture cannot make a graph,
// unless it has one already, and returns err.
func (c *Capture[N]) Invalidate(err error) error {
	if c.err == nil {
		c.err = err
	}
	return err
}

// End stops routing the stream's allocations. An invalidated capture gives
// the blocks it allocated back to its pool, as Abort does, and returns its
// reason. Otherwise End returns what the graph holds and counts the graph on
// the pool (GraphCreated), for the caller to make it; the caller calls
// GraphDestroyed when the graph is destroyed.
func (c *Capture[N]) End() (accel.GraphMemory, error) {
	if c.err != nil {
		c.Abort()
		return accel.GraphMemory{}, c.err
	}
	res, err := c.a.EndCapture(c.stream)
	if err != nil {
		return accel.GraphMemory{}, err
	}
	c.a.GraphCreated(c.Pool)
	return res.Memory, nil
}

// Abort stops routing the stream's allocations and gives the blocks the
// capture allocated, and did not free, back to the pool.
func (c *Capture[N]) Abort() { c.a.AbortCapture(c.stream) }

// BeginOn starts a capture into p on a stream whose capture state is *cur
// (nil when not capturing), for a backend that records its own nodes:
// refused with accel.ErrAlreadyCapturing while one is in progress. backend
// and stream name the stream in errors.
func BeginOn[N any](cur **Capture[N], a *Caching, backend string, stream int64, p accel.Pool) error {
	if *cur != nil {
		return fmt.Errorf("%s: stream %d: %w", backend, stream, accel.ErrAlreadyCapturing)
	}
	c, err := StartCapture[N](a, stream, p)
	if err != nil {
		return fmt.Errorf("%s: stream %d: %w", backend, stream, err)
	}
	*cur = c
	return nil
}

// EndOn ends the capture *cur (accel.ErrNotCapturing without one) and clears
// it; the caller makes its graph from the capture's pool and nodes and the
// memory returned.
func EndOn[N any](cur **Capture[N], backend string, stream int64) (*Capture[N], accel.GraphMemory, error) {
	c := *cur
	if c == nil {
		return nil, accel.GraphMemory{}, fmt.Errorf("%s: stream %d: %w", backend, stream, accel.ErrNotCapturing)
	}
	*cur = nil
	mem, err := c.End()
	return c, mem, err
}

// AbortOn aborts the capture *cur, if any, and clears it.
func AbortOn[N any](cur **Capture[N]) {
	if c := *cur; c != nil {
		*cur = nil
		c.Abort()
	}
}
