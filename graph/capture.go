package graph

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/internal/failpoint"
)

// warmed is a spec prepared and run eagerly: what its capture reads. Sizing
// warms every spec before any capture; the capture then runs no forward of
// its own.
type warmed struct {
	spec   SlotSpec
	lease  *Lease
	ids    []int64
	rows   []Row
	static map[string]accel.Tensor
	keys   []string
	slot   *Slot             // outputs allocated outside the pool
	golden map[string][]byte // the last warm-up's outputs: the eager result
	peak   int64             // the most the eager step allocated at once
}

// guard turns a panic anywhere in the node's code into an error, leaves the
// stream out of capture mode and returns the padding rows' storage.
func (r *Runner) guard(w *warmed, err *error) {
	if p := recover(); p != nil {
		r.stream.AbortCapture()
		*err = fmt.Errorf("graph: %v: panic: %v\n%s", w.spec, p, debug.Stack())
	}
	if w.ids != nil {
		if rerr := r.pad.Reset(w.ids, true); rerr != nil && *err == nil {
			*err = rerr
		}
	}
}

// prepare declares, admits and plans the spec's dummy batch and stages its
// inputs into the static buffers.
func (r *Runner) prepareWarmed(w *warmed) error {
	in, err := r.node.Prepare(r.stream, w.lease, w.rows)
	if err != nil {
		return fmt.Errorf("graph: %v: prepare: %w", w.spec, err)
	}
	if w.static == nil {
		if w.static, w.keys, err = r.intern(w.spec, in); err != nil {
			return err
		}
	}
	for name, v := range w.static {
		h, ok := in[name]
		if !ok {
			return fmt.Errorf("graph: %v: prepare no longer gives input %q", w.spec, name)
		}
		if err := r.stage(r.stream, v, h); err != nil {
			return err
		}
	}
	return nil
}

// newWarmed is the start of a spec's warm-up, or of a re-recording of its
// slot: its capture lease.
func newWarmed(spec SlotSpec) *warmed {
	return &warmed{spec: spec, lease: &Lease{Bucket: spec.Bucket, Slot: spec.Slot, Capture: true, cfg: spec.Config, cfgIdx: spec.ConfigIdx}}
}

// open takes the spec's padding rows and declares, admits and plans its
// dummy batch (prepareWarmed). Call it with r.guard deferred on w.
func (r *Runner) open(w *warmed) (err error) {
	spec := w.spec
	if w.ids, err = r.pad.Ensure(fmt.Sprintf("%d_slot%d", spec.ConfigIdx, spec.Slot), spec.Bucket.BatchSize); err != nil {
		return err
	}
	w.rows = spec.Config.dummyRows(w.ids, spec.Bucket.Tokens)
	return r.prepareWarmed(w)
}

// warm runs a spec eagerly NumWarmup times, measuring the step's peak
// allocation, and allocates the slot's static outputs outside the pool.
// Only a warm-up whose peak is a cost (measure: sizing's, not a capture's
// of a spec sizing did not warm) empties the allocator's cache to measure
// the segments the step reserves: emptying it costs the next allocations a
// trip to the device (a synchronising free on CUDA).
func (r *Runner) warm(spec SlotSpec, measure bool) (w *warmed, err error) {
	w = newWarmed(spec)
	defer r.guard(w, &err)
	if err := r.open(w); err != nil {
		return nil, err
	}
	for i := 0; i < NumWarmup; i++ {
		if err := r.stream.Synchronize(); err != nil {
			return nil, err
		}
		if i == 0 && measure {
			// With no empty segment cached, the first warm-up's growth in
			// reserved segments is what the step needs of the device:
			// more than its bytes where its blocks do not fill their
			// segments, or where a large block finds no free one its size.
			r.dev.Allocator().EmptyCache()
		}
		r.dev.Allocator().ResetPeak()
		st0 := r.dev.Allocator().Stats()
		base := st0.Allocated
		l := accel.On(r.stream)
		outs, err := r.node.Forward(l, w.lease, w.static)
		if err == nil {
			err = l.Err()
		}
		if err != nil {
			return nil, fmt.Errorf("graph: %v: warm-up %d: %w", spec, i+1, err)
		}
		st := r.dev.Allocator().Stats()
		w.peak = max(w.peak, st.PeakAllocated-base)
		if i == 0 {
			w.peak = max(w.peak, st.PeakReserved-st0.Reserved)
		}
		if i == NumWarmup-1 {
			w.slot = &Slot{static: w.static, inputKeys: w.keys, padIDs: w.ids, configIdx: spec.ConfigIdx, outputs: map[string]accel.Tensor{}}
			if w.golden, err = r.keepOutputs(w.slot, outs); err != nil {
				r.freeOutputs(w.slot)
				return nil, err
			}
			if err := r.checkKeepsFree(spec); err != nil {
				r.freeOutputs(w.slot)
				return nil, err
			}
		} else {
			l.Free(mapValues(outs)...)
			if err := l.Err(); err != nil {
				return nil, err
			}
		}
		// Back to the capture's starting state: padding rows at rest, the
		// step prepared again.
		if err := r.pad.Reset(w.ids, false); err != nil {
			return nil, err
		}
		if err := r.prepareWarmed(w); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// checkKeepsFree fails a warm-up that left less device memory free than
// Options.KeepFree asks.
func (r *Runner) checkKeepsFree(spec SlotSpec) error {
	if r.opts.KeepFree == nil {
		return nil
	}
	want := r.opts.KeepFree()
	st := r.dev.Allocator().Stats()
	free := r.dev.MemInfo().Free + (st.Reserved - st.PoolReserved) - (st.Allocated - st.PoolAllocated)
	if free < want {
		return fmt.Errorf("graph: %v: its static outputs leave %d bytes free, the largest eager step needs %d", spec, free, want)
	}
	return nil
}

// captureWarmed captures a warmed spec into pool: the step is prepared again
// (other specs' warm-ups have used the shared static buffers and resources
// since), captured, instantiated and checked against its eager result. It
// returns the slot (sharing the warmed outputs) and what the graph holds.
func (r *Runner) captureWarmed(w *warmed, pool accel.Pool) (slot *Slot, mem accel.GraphMemory, err error) {
	defer failpoint.Enter(failpoint.PhaseCapture)()
	defer r.guard(w, &err)
	if err := r.pad.Reset(w.ids, false); err != nil {
		return nil, mem, err
	}
	if err := r.prepareWarmed(w); err != nil {
		return nil, mem, err
	}
	// Plan writes and staged inputs must land before capture starts: the
	// capture records, it does not run.
	if err := r.stream.Synchronize(); err != nil {
		return nil, mem, err
	}
	slot = &Slot{static: w.static, inputKeys: w.keys, padIDs: w.ids,
		configIdx: w.spec.ConfigIdx, outputs: w.slot.outputs}
	g, err := r.record(w, slot.outputs, pool)
	if err != nil {
		return nil, mem, err
	}
	slot.graph = g
	mem = g.Memory()
	if slot.exec, err = g.Instantiate(); err != nil {
		slot.destroy()
		return nil, mem, fmt.Errorf("graph: %v: instantiate: %w", w.spec, err)
	}
	// What the executable takes is outside the allocator: by the walk's
	// measured rate, or the backend's figure where none was measured.
	slot.outside = r.execMem[w.spec.ConfigIdx].bytes(g.Nodes(), slot.exec)
	mem.Outside = slot.outside
	if !r.opts.NoGoldenCheck {
		if err := r.goldenCheck(w.spec, slot, w.golden); err != nil {
			slot.destroy()
			return nil, mem, err
		}
	}
	return slot, mem, nil
}

// record captures the prepared spec's forward into pool, its outputs copied
// into the static outputs at the graph's end.
func (r *Runner) record(w *warmed, outputs map[string]accel.Tensor, pool accel.Pool) (accel.Graph, error) {
	g, err := accel.Capture(r.stream, pool, func() error {
		l := accel.On(r.stream)
		outs, err := r.node.Forward(l, w.lease, w.static)
		if err != nil {
			return err
		}
		for name, o := range outs {
			dst, ok := outputs[name]
			if !ok {
				return fmt.Errorf("capture gave output %q the warm-up did not", name)
			}
			l.Copy(dst, o)
		}
		l.Free(mapValues(outs)...)
		return l.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("graph: %v: capture: %w", w.spec, err)
	}
	return g, nil
}

// captureSpec warms (unless sizing already did) and captures one slot into
// the runner's pool.
func (r *Runner) captureSpec(spec SlotSpec) (*Slot, error) {
	w := r.warmedSpecs[spec.key()]
	if w == nil {
		var err error
		if w, err = r.warm(spec, false); err != nil {
			return nil, err
		}
	}
	delete(r.warmedSpecs, spec.key())
	slot, _, err := r.captureWarmed(w, r.pool)
	if err != nil {
		r.freeOutputs(w.slot)
	}
	return slot, err
}

func (r *Runner) freeOutputs(s *Slot) {
	if s == nil {
		return
	}
	for _, o := range s.outputs {
		_ = r.dev.Free(o.Buf)
	}
	s.outputs = nil
}

// keepOutputs allocates the slot's static outputs outside the graph pool,
// shaped like the warm-up's outputs, and returns the warm-up's values (the
// eager result the golden check compares a replay with). It frees outs.
func (r *Runner) keepOutputs(slot *Slot, outs map[string]accel.Tensor) (map[string][]byte, error) {
	golden := map[string][]byte{}
	// In name order, so the allocator places them as Plan predicts.
	for _, name := range sortedNames(outs) {
		o := outs[name]
		b, err := r.dev.Alloc(o.Bytes())
		if err != nil {
			return nil, fmt.Errorf("static output %q: %w", name, err)
		}
		slot.outputs[name] = accel.Tensor{Buf: b, DType: o.DType, Rows: o.Rows, Cols: o.Cols}
		if !r.opts.NoGoldenCheck {
			v, err := accel.Download(r.stream, o.Buf.Slice(0, o.Bytes()))
			if err != nil {
				return nil, err
			}
			golden[name] = v
		}
	}
	l := accel.On(r.stream)
	l.Free(mapValues(outs)...)
	return golden, l.Err()
}

// goldenCheck replays the fresh graph once on the capture's own prepared
// inputs and compares its outputs with the eager warm-up's: bit for bit on a
// deterministic device, within tolerance elsewhere.
func (r *Runner) goldenCheck(spec SlotSpec, slot *Slot, golden map[string][]byte) error {
	if err := slot.exec.Launch(r.stream); err != nil {
		return fmt.Errorf("graph: %v: golden replay: %w", spec, err)
	}
	exact := r.dev.Capability().Deterministic
	for name, o := range slot.outputs {
		got, err := accel.Download(r.stream, o.Buf.Slice(0, o.Bytes()))
		if err != nil {
			return fmt.Errorf("graph: %v: golden replay: %w", spec, err)
		}
		if i, ok := compareBytes(got, golden[name], o.DType, exact, r.opts.Tolerance); !ok {
			return fmt.Errorf("graph: %v: golden check: output %q element %d differs between replay and eager", spec, name, i)
		}
	}
	return nil
}

// WarmDeferred reports whether the last WarmNext left its spec for a later
// call because the step's resources refused it for now (ErrNotAdmitted): a
// caller backs off before it asks again.
func (r *Runner) WarmDeferred() bool { return r.warmDeferred }

// ErrNotAdmitted marks a Node.Prepare failure that is only backpressure (its
// resources are busy with real requests): a capture that meets it is tried
// again later rather than dropped.
var ErrNotAdmitted = errors.New("step not admitted")

// CaptureBucket captures every slot of one bucket and registers it at once if
// all passed their golden check: the bucket goes live atomically, and a step
// never leases it before. It is for a single rank capturing in the
// background, in any order, once every spec of the bucket's config has been
// warmed (WarmNext) so the static inputs are sized. A failure that is only
// backpressure (ErrNotAdmitted) leaves the bucket to be tried again; any other
// drops it, logged at ERROR.
func (r *Runner) CaptureBucket(k BucketKey) error {
	if r.group.Size() > 1 {
		return fmt.Errorf("graph: %s: CaptureBucket is for a single rank; ranks capture together with Capture", r.name)
	}
	r.mu.Lock()
	_, live := r.buckets[k]
	r.mu.Unlock()
	if live {
		return nil
	}
	r.releaseExecCopies()
	var specs []SlotSpec
	for _, sp := range r.specs {
		if sp.Bucket == k {
			specs = append(specs, sp)
		}
	}
	if len(specs) == 0 {
		return fmt.Errorf("graph: %s: no bucket %v", r.name, k)
	}
	slots := make([]*Slot, len(specs))
	for _, sp := range specs {
		w := r.warmedSpecs[sp.key()]
		if w == nil {
			var err error
			if w, err = r.warm(sp, false); err != nil {
				r.dropSlots(slots)
				return r.bucketFailed(k, err)
			}
			r.warmedSpecs[sp.key()] = w
		}
		slot, _, err := r.captureWarmed(w, r.pool)
		if err != nil {
			r.dropSlots(slots)
			return r.bucketFailed(k, err)
		}
		slots[sp.Slot] = slot
	}
	for _, sp := range specs {
		delete(r.warmedSpecs, sp.key())
	}
	r.mu.Lock()
	r.register(&Bucket{Key: k, Config: specs[0].Config, ConfigIdx: specs[0].ConfigIdx, Slots: slots})
	r.mu.Unlock()
	return nil
}

func (r *Runner) dropSlots(slots []*Slot) {
	for _, s := range slots {
		if s != nil {
			s.destroy()
		}
	}
}

func (r *Runner) bucketFailed(k BucketKey, err error) error {
	if errors.Is(err, ErrNotAdmitted) {
		return err
	}
	for _, sp := range r.specs {
		if sp.Bucket == k {
			if w := r.warmedSpecs[sp.key()]; w != nil {
				r.freeOutputs(w.slot)
				delete(r.warmedSpecs, sp.key())
			}
		}
	}
	r.mu.Lock()
	r.dropped = append(r.dropped, k)
	r.unreplayed[k] = "capture dropped: " + err.Error()
	r.mu.Unlock()
	r.log.Error("accelerator graph bucket dropped; it will run eager", "runner", r.name, "bucket", k.String(), "reason", err.Error())
	return fmt.Errorf("graph: %s: %v dropped: %w", r.name, k, err)
}

// ReleasePadding hands back the padding rows' capture-time storage (after a
// run of CaptureBucket calls).
func (r *Runner) ReleasePadding() error { return r.pad.ReleaseAll() }

// ReleaseWarmed gives back the static outputs of warmed specs whose bucket is
// not in keep (nil: every one): a background plan that left a bucket out
// must not hold its outputs for good.
func (r *Runner) ReleaseWarmed(keep map[BucketKey]bool) {
	for k, w := range r.warmedSpecs {
		if !keep[w.spec.Bucket] {
			r.freeOutputs(w.slot)
			delete(r.warmedSpecs, k)
		}
	}
}
