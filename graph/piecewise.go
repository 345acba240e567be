package graph

import (
	"fmt"
	"time"

	"github.com/reprise-ml/reprise/accel"
)

// Piecewise capture: a Runner can capture one inner region of a forward (the
// transformer block loop of a prefill, say) instead of a whole step. The
// surrounding forward stays eager and calls RunRegion itself, handing the
// region its inputs as device tensors of the real length; the region's
// resources are planned into the lease's per-slot buffers for the real rows
// only (the padded tail is set apart, so padding rows never scatter over
// real state), the inputs are copied into the static buffers with the tail
// zeroed, and the graph replays.
//
// Shapes are buckets (batch size, total tokens) of a Config like any other:
// a batched region replays the exact padded shape, a packed one the smallest
// token bucket that holds the real tokens (SelectBucket). A region's node
// asks for two slots only when a resource of its step forces a double
// buffer. Regions of one node may share a graph pool (Options.Pool): their
// outputs live outside it, so one region's replay never overwrites
// another's outputs. A region's shapes are sized and planned like any
// bucket, and a shape that fails to capture is dropped and served eager.

// RegionOutput is what a region's replay produced: its static output
// buffers, of which the first Len rows are the real ones.
type RegionOutput struct {
	outs map[string]accel.Tensor
	n    int
	s    accel.Stream
}

// Len is the number of real rows.
func (o *RegionOutput) Len() int { return o.n }

// Names lists the outputs.
func (o *RegionOutput) Names() []string {
	var ns []string
	for n := range o.outs {
		ns = append(ns, n)
	}
	return ns
}

// View returns the real rows of an output WITHOUT copying: it aliases the
// runner's static output buffer and is overwritten by the next replay of
// this region (nothing else writes there: the buffer lives outside the
// graph pool). Read it within the same step, in the stream's order; use Get
// for anything that must outlive it.
func (o *RegionOutput) View(name string) (accel.Tensor, bool) {
	t, ok := o.outs[name]
	if !ok {
		return accel.Tensor{}, false
	}
	return t.RowSlice(0, o.n), true
}

// Get returns an owned copy of an output's real rows, allocated on the
// region's stream (free it with the stream's Free) and enqueued after the
// replay: it stays valid whatever replays next.
func (o *RegionOutput) Get(name string) (accel.Tensor, error) {
	v, ok := o.View(name)
	if !ok {
		return accel.Tensor{}, fmt.Errorf("graph: region has no output %q", name)
	}
	l := accel.On(o.s)
	c := l.Alloc(v.DType, v.Rows, v.Cols)
	l.Copy(c, v)
	return c, l.Err()
}

// RunRegion replays a captured region on the lease for a step whose real
// inputs are in (device tensors whose rows, or columns for one-row inputs,
// follow the step's tokens). The region's resource plans for the real rows
// are in the lease's slot buffers already, written ahead on the plan stream
// (PlanStream) with planDone recorded after them, or plan writes them now,
// on the runner's stream (one of plan and planDone is nil). Then each input
// is copied into its static buffer, the tail past the real tokens zeroed,
// the replay waits on planDone, and the graph replays. It returns the
// outputs with n real rows. Inputs on another stream must be ready before:
// RunRegion orders its work on the runner's stream only.
func (r *Runner) RunRegion(l *Lease, in map[string]accel.Tensor, n int, planDone accel.Event, plan func(s accel.Stream) error) (*RegionOutput, error) {
	t0 := time.Now()
	s, err := r.slotFor(l)
	if err != nil {
		return nil, err
	}
	if plan != nil {
		if err := plan(r.stream); err != nil {
			return nil, err
		}
	}
	lc := accel.On(r.stream)
	for _, name := range s.inputKeys {
		src, ok := in[name]
		if !ok {
			return nil, fmt.Errorf("graph: region %v: no input %q", l.Bucket, name)
		}
		dst := s.static[name]
		if src.DType != dst.DType || src.Bytes() > dst.Bytes() || (src.Rows != dst.Rows && src.Cols != dst.Cols) {
			return nil, fmt.Errorf("graph: region %v: input %q is %v, its static buffer %v", l.Bucket, name, src, dst)
		}
		nb := src.Bytes()
		head := accel.Tensor{Buf: dst.Buf.Slice(0, nb), DType: src.DType, Rows: src.Rows, Cols: src.Cols}
		lc.Copy(head, src)
		if tail := dst.Bytes() - nb; tail > 0 {
			tt := accel.Tensor{Buf: dst.Buf.Slice(nb, tail), DType: dst.DType, Rows: 1, Cols: int(tail / dst.DType.Size())}
			if dst.DType == accel.I32 {
				lc.FillI32(tt, 0)
			} else {
				lc.FillF32(tt, 0)
			}
		}
	}
	if err := lc.Err(); err != nil {
		return nil, err
	}
	if planDone != nil {
		if err := r.stream.Wait(planDone); err != nil {
			return nil, err
		}
	}
	if err := s.exec.Launch(r.stream); err != nil {
		return nil, err
	}
	r.tele.replay(l.Bucket, time.Since(t0))
	// A region has no Release: its real and padding rows (tokens, for a
	// packed one) are counted here, against its outputs' rows.
	rows := 0
	for _, o := range s.outputs {
		rows = max(rows, o.Rows)
	}
	r.tele.release(l.Bucket, n, max(rows-n, 0))
	return &RegionOutput{outs: s.outputs, n: n, s: r.stream}, nil
}
