package graph

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/alloc"
	"github.com/reprise-ml/reprise/comm"
)

// CaptureCost is what one bucket costs on the device: its eager step's peak
// (measured by warming it up), and what a capture of it holds (measured by
// capturing it, or its walk's larger bucket, once and throwing it away).
type CaptureCost struct {
	Bucket BucketKey `json:"bucket"`
	// Peak is the most the eager step allocated at once, over its slots.
	Peak int64 `json:"peak"`
	// Graph is the pool bytes one slot's capture takes: what it keeps plus
	// the scratch it needs during a replay. Negative: the bucket cannot be
	// planned (a slot failed to warm up or to capture); its peak still
	// counts toward the floor.
	Graph int64 `json:"graph"`
	// Kept is the pool bytes still allocated when one slot's capture ended.
	Kept int64 `json:"kept"`
	// Slots is the bucket's double-buffer slots; a bucket adds all or none.
	Slots int `json:"slots"`
	// Outside is one slot's device memory outside the pool: what its static
	// outputs hold in the allocator, were they alone (Plan packs the chosen
	// buckets' outputs together).
	Outside int64 `json:"outside"`
	// Outputs is one slot's static output sizes in bytes, in the order they
	// are allocated: what Plan packs as the allocator will.
	Outputs []int64 `json:"outputs,omitempty"`
	// Executable is one slot's instantiated graph's memory outside any pool.
	Executable int64 `json:"executable"`
	// Lender is the larger bucket whose capture costed this one; nil when
	// it was captured for its own cost.
	Lender *BucketKey `json:"lender,omitempty"`
}

// Plannable reports whether the bucket can be planned.
func (c CaptureCost) Plannable() bool { return c.Graph >= 0 }

// Scratch is what one slot needs in the pool during a replay beyond what it
// keeps; the graphs of a pool replay one at a time, so they share it.
func (c CaptureCost) Scratch() int64 { return max(0, c.Graph-c.Kept) }

// Size warms every spec and every slot before any capture, measuring each
// bucket's eager peak, then captures and throws away, per config, its largest
// bucket, its second largest and any bucket whose peak exceeds every larger
// one's, to measure what a graph keeps and needs in the pool; the other
// buckets are costed from the nearest larger measured one. A config whose
// graphs do not nest (the second largest needs more than the largest) has
// every bucket measured. If a config's largest bucket fails to capture, the
// next one sizes the rest. Warmed specs are kept, so the real capture runs no
// forward of its own; throwaway captures free their memory, pass or fail.
func (r *Runner) Size(ctx context.Context) (map[BucketKey]CaptureCost, error) {
	if _, err := r.Prepare(); err != nil {
		return nil, err
	}
	for {
		// Nothing else runs meanwhile: a refusal will not pass, so it fails
		// the bucket.
		spec, more := r.warmNext(false)
		if !more {
			break
		}
		// Warm-ups run forwards, which may hold collectives: every rank
		// meets the same barriers, pass or fail.
		if err := r.group.Barrier(ctx); err != nil {
			return nil, fmt.Errorf("graph: %s: barrier after warming %v: %w", r.name, spec, err)
		}
	}
	return r.measureCosts(), nil
}

// WarmNext warms the next spec, largest first, unless it is warmed already
// or its bucket failed (the spec is returned either way); more is false once
// every spec was. A spec that fails to warm is logged and
// its bucket will not be planned, except when the step's resources refused
// it for now (ErrNotAdmitted: real requests hold the memory its padding rows
// need, as while serving): that spec stays next, for a later call to retry.
func (r *Runner) WarmNext() (spec SlotSpec, more bool) { return r.warmNext(true) }

func (r *Runner) warmNext(retry bool) (spec SlotSpec, more bool) {
	r.warmDeferred = false
	for r.warmIdx < len(r.specs) {
		spec = r.specs[r.warmIdx]
		r.warmIdx++
		// A spec warmed already, or of a bucket whose other slot failed, is
		// not warmed again, but it is still returned: Size meets a barrier
		// per spec, and a peer whose warm-ups passed meets one for it.
		if _, done := r.warmedSpecs[spec.key()]; done || r.warmFailed[spec.Bucket] {
			return spec, true
		}
		w, err := r.warm(spec, true)
		if retry && errors.Is(err, ErrNotAdmitted) {
			r.warmIdx--
			r.warmDeferred = true
			r.log.Info("accelerator graph warm-up deferred: resources busy", "runner", r.name,
				"bucket", spec.Bucket.String(), "slot", spec.Slot)
			return spec, true
		}
		if err != nil {
			r.warmFailed[spec.Bucket] = true
			r.log.Error("accelerator graph warm-up failed; the bucket will not be planned", "runner", r.name,
				"bucket", spec.Bucket.String(), "slot", spec.Slot, "err", err)
		} else {
			r.warmedSpecs[spec.key()] = w
		}
		return spec, true
	}
	return SlotSpec{}, false
}

// measureCosts costs every bucket from its warm-ups and throwaway captures
// (see Size); call it once every spec is warmed.
func (r *Runner) measureCosts() map[BucketKey]CaptureCost {
	costs := map[BucketKey]CaptureCost{}
	for _, spec := range r.specs {
		k := spec.Bucket
		c := costs[k]
		c.Bucket, c.Slots = k, r.nslots
		if w := r.warmedSpecs[spec.key()]; w != nil {
			c.Peak = max(c.Peak, w.peak)
			ns := outputSizes(w.slot)
			if o := outputsCost(ns); o >= c.Outside {
				c.Outside, c.Outputs = o, ns
			}
		}
		costs[k] = c
	}
	for ci := range r.configs {
		var ks []BucketKey // largest first
		for _, spec := range r.specs {
			if spec.ConfigIdx == ci && spec.Slot == 0 {
				ks = append(ks, spec.Bucket)
			}
		}
		r.sizeConfig(ks, costs, r.warmFailed)
	}
	return costs
}

// sizeConfig measures a config's buckets (largest first) as Size describes.
func (r *Runner) sizeConfig(ks []BucketKey, costs map[BucketKey]CaptureCost, failed map[BucketKey]bool) {
	var measured []BucketKey
	nests := true
	peakSoFar := int64(-1)
	for _, k := range ks {
		c := costs[k]
		if failed[k] {
			c.Graph = -1
			costs[k] = c
			continue
		}
		must := len(measured) < 2 || c.Peak > peakSoFar || !nests
		peakSoFar = max(peakSoFar, c.Peak)
		if !must {
			// Costed from the nearest larger measured bucket.
			l := measured[len(measured)-1]
			lc := costs[l]
			c.Graph, c.Kept, c.Executable, c.Lender = lc.Graph, lc.Kept, lc.Executable, &l
			costs[k] = c
			continue
		}
		if err := r.throwaway(k, &c); err != nil {
			r.log.Warn("throwaway capture failed; the bucket will not be planned", "runner", r.name, "bucket", k.String(), "err", err)
			c.Graph = -1
			costs[k] = c
			continue
		}
		costs[k] = c
		measured = append(measured, k)
		if len(measured) == 2 && costs[measured[1]].Graph > costs[measured[0]].Graph {
			nests = false
		}
	}
}

// throwaway captures slot 0 of k into a fresh pool to measure it, then frees
// everything the capture took.
func (r *Runner) throwaway(k BucketKey, c *CaptureCost) error {
	w := r.warmedSpecs[specKey{k, 0}]
	if w == nil {
		return fmt.Errorf("graph: %v was not warmed", k)
	}
	pool, err := r.dev.NewPool()
	if err != nil {
		return err
	}
	defer pool.Release()
	slot, mem, err := r.captureWarmed(w, pool)
	if err != nil {
		return err
	}
	if r.execMem[w.spec.ConfigIdx] == nil {
		// The walk's first throwaway graph: its copies measure what an
		// executable takes per node, and are held until capture.
		r.execMem[w.spec.ConfigIdx] = measureExec(r.dev, slot.graph)
		slot.outside = r.execMem[w.spec.ConfigIdx].bytes(slot.graph.Nodes(), slot.exec)
	}
	c.Graph, c.Kept, c.Executable, c.Lender = mem.PoolGrowth, mem.Kept, slot.outside, nil
	slot.destroy()
	return nil
}

// ExecHeld is the device memory the executables measured on hold until the
// runner captures: what the captured graphs' executables may reuse (Plan's
// reusable term).
func (r *Runner) ExecHeld() int64 {
	var n int64
	for _, m := range r.execMem {
		n += m.Held
	}
	return n
}

// ExecMemory is the executable memory measured for each config (by index)
// that had a throwaway capture.
func (r *Runner) ExecMemory() map[int]ExecMemory {
	out := map[int]ExecMemory{}
	for ci, m := range r.execMem {
		out[ci] = ExecMemory{PerNode: m.PerNode, Measured: m.Measured, Held: m.Held}
	}
	return out
}

func (r *Runner) releaseExecCopies() {
	for _, m := range r.execMem {
		m.release()
	}
}

// SizeLent captures every bucket a lender costed, thrown away, for its own
// cost, if wanted here or on another rank: a plan that leaves graphs out needs
// what each takes, not what its walk's largest does. Every rank asks, so the
// ranks of a group size again together or not at all.
func (r *Runner) SizeLent(ctx context.Context, costs map[BucketKey]CaptureCost, wanted bool) (Resized, error) {
	flag := int64(0)
	if wanted {
		flag = 1
	}
	agreed, err := comm.Agree(ctx, r.group, []int64{flag}, comm.Max)
	if err != nil {
		return Resized{}, err
	}
	out := make(map[BucketKey]CaptureCost, len(costs))
	for k, c := range costs {
		out[k] = c
	}
	if agreed[0] == 0 {
		return Resized{Costs: out}, nil
	}
	for _, spec := range r.specs {
		c, ok := out[spec.Bucket]
		if spec.Slot != 0 || !ok || c.Lender == nil {
			continue
		}
		if err := r.throwaway(spec.Bucket, &c); err != nil {
			r.log.Warn("throwaway capture failed; the bucket will not be planned", "runner", r.name, "bucket", spec.Bucket.String(), "err", err)
			c.Graph, c.Lender = -1, nil
		}
		out[spec.Bucket] = c
	}
	return Resized{Costs: out, Resized: true}, nil
}

// Resized is SizeLent's answer: the costs, and whether any rank asked to
// measure the lent ones (then every rank did).
type Resized struct {
	Costs   map[BucketKey]CaptureCost
	Resized bool
}

// outputSizes is a slot's static output sizes, in the order keepOutputs
// allocates them (by name).
func outputSizes(s *Slot) []int64 {
	var ns []int64
	for _, name := range sortedNames(s.outputs) {
		ns = append(ns, s.outputs[name].Bytes())
	}
	return ns
}

// outputsCost is what a slot's static outputs (their sizes, outputSizes) hold in the allocator on their
// own: small ones share segments at the allocator's granularity, a large one
// holds its segments but for a remainder worth splitting off.
func outputsCost(sizes []int64) int64 {
	var p alloc.Packer
	for _, n := range sizes {
		p.Alloc(n)
	}
	return p.Held()
}

// WarmedOutputs is the device memory the outputs of warmed, uncaptured specs
// hold: it comes back when the plan leaves them out.
func (r *Runner) WarmedOutputs() int64 {
	var n int64
	for _, w := range r.warmedSpecs {
		for _, o := range w.slot.outputs {
			n += alloc.RoundUp(o.Bytes())
		}
	}
	return n
}

// CapturePlan says which buckets each graph pool captures, chosen before any
// is.
type CapturePlan struct {
	// Buckets chosen per pool, in capture order (largest first).
	Buckets map[string][]BucketKey `json:"buckets"`
	// Predicted pool bytes: what the chosen graphs keep plus the most
	// scratch any one needs beyond that.
	Predicted map[string]int64 `json:"predicted"`
	// Outside is the chosen buckets' memory outside the pool: static outputs
	// and executables.
	Outside map[string]int64 `json:"outside"`
	// Floor is the largest eager step on the device: what must stay free
	// beside the graphs.
	Floor int64 `json:"floor"`
	// Free is the memory the plan had to fit in.
	Free int64 `json:"free"`
	// Reserve is the rest of the segments the chosen outputs open: free, but
	// only for small requests, so the plan keeps it beside the floor. It is
	// not in Total (other small allocations use it).
	Reserve int64 `json:"reserve"`
	// Why says, for each plannable bucket left out, why.
	Why map[BucketKey]string `json:"-"`
}

// Total is the plan's predicted memory: pools and outside.
func (p CapturePlan) Total() int64 {
	var t int64
	for _, v := range p.Predicted {
		t += v
	}
	for _, v := range p.Outside {
		t += v
	}
	return t
}

// Count is the number of buckets chosen across pools.
func (p CapturePlan) Count() int {
	n := 0
	for _, b := range p.Buckets {
		n += len(b)
	}
	return n
}

// Chosen reports whether a bucket of a pool was planned.
func (p CapturePlan) Chosen(pool string, k BucketKey) bool {
	return slices.Contains(p.Buckets[pool], k)
}

// Plan chooses the cheapest buckets across every pool of a device, adding
// them while the largest eager step (the floor) still fits in free beside
// them. A pool costs the sum of what its graphs keep plus the most any one
// needs beyond that, so a bucket adds its slots' kept bytes and whatever it
// needs past the pool's most so far, plus its slots' memory outside the pool
// (static outputs, executables). A bucket adds all its slots or none.
// Executable memory the device keeps from throwaway copies may be reused,
// up to reusable bytes in all. The result does not depend on the order of
// pools.
func Plan(pools map[string]map[BucketKey]CaptureCost, free, reusable int64) CapturePlan {
	p := CapturePlan{Buckets: map[string][]BucketKey{}, Predicted: map[string]int64{}, Outside: map[string]int64{},
		Free: free, Why: map[BucketKey]string{}}
	type cand struct {
		pool string
		c    CaptureCost
	}
	var cands []cand
	for name, costs := range pools {
		for _, c := range costs {
			p.Floor = max(p.Floor, c.Peak)
			if c.Plannable() {
				cands = append(cands, cand{name, c})
			} else {
				p.Why[c.Bucket] = "cannot be planned: a slot failed to warm up or capture"
			}
		}
	}
	// A deterministic order, whatever the map iteration: pool, then
	// largest bucket first.
	slices.SortFunc(cands, func(a, b cand) int {
		if a.pool != b.pool {
			if a.pool < b.pool {
				return -1
			}
			return 1
		}
		return compareKeys(a.c.Bucket, b.c.Bucket)
	})
	kept := map[string]int64{}
	scratch := map[string]int64{}
	// delta orders the candidates: what a bucket would add, its outputs
	// costed on their own.
	delta := func(x cand) int64 {
		s := int64(x.c.Slots)
		return s*x.c.Kept + max(0, x.c.Scratch()-scratch[x.pool]) + s*(x.c.Outside+x.c.Executable)
	}
	var (
		used   int64            // the chosen buckets' total, less reused executables
		placed map[string]int64 // the chosen buckets' memory outside each pool
	)
	left := cands
	for len(left) > 0 {
		bi := 0
		bd := delta(left[0])
		for i := 1; i < len(left); i++ {
			if d := delta(left[i]); d < bd {
				bi, bd = i, d
			}
		}
		x := left[bi]
		left = slices.Delete(left, bi, bi+1)
		// The chosen buckets with this one, their outputs placed as the
		// allocator will: the rest of the segments they open is free,
		// but only for small requests (the floor's large ones cannot use
		// it).
		p.Buckets[x.pool] = append(p.Buckets[x.pool], x.c.Bucket)
		outside, exe, rest := placeOutside(pools, p.Buckets)
		pooled := int64(0)
		for name, k := range kept {
			pooled += k + scratch[name]
		}
		s := int64(x.c.Slots)
		pooled += s*x.c.Kept + max(0, x.c.Scratch()-scratch[x.pool])
		var total int64
		for _, v := range outside {
			total += v
		}
		total += pooled - min(reusable, exe)
		if total+p.Floor+rest > free {
			p.Buckets[x.pool] = p.Buckets[x.pool][:len(p.Buckets[x.pool])-1]
			p.Why[x.c.Bucket] = fmt.Sprintf("does not fit: it adds %d bytes, %d are left beside the %d-byte floor",
				total-used, max(0, free-used-p.Floor-rest), p.Floor)
			continue
		}
		used, placed, p.Reserve = total, outside, rest
		kept[x.pool] += s * x.c.Kept
		scratch[x.pool] = max(scratch[x.pool], x.c.Scratch())
	}
	for name := range pools {
		p.Predicted[name] = kept[name] + scratch[name]
		p.Outside[name] = placed[name]
		slices.SortFunc(p.Buckets[name], compareKeys)
	}
	return p
}

// placeOutside is the memory outside the pools of the chosen buckets (by
// pool): their executables, and their static outputs as the allocator will
// place them, every slot in capture order (pools by name, largest bucket
// first), all in the device's default pool, so that small outputs share
// segments. It also returns the executables' total and the rest of the
// segments the outputs open.
func placeOutside(pools map[string]map[BucketKey]CaptureCost, chosen map[string][]BucketKey) (outside map[string]int64, exe, rest int64) {
	names := make([]string, 0, len(chosen))
	for name := range chosen {
		names = append(names, name)
	}
	slices.Sort(names)
	outside = map[string]int64{}
	var packer alloc.Packer
	for _, name := range names {
		ks := slices.Clone(chosen[name])
		slices.SortFunc(ks, compareKeys)
		for _, k := range ks {
			c := pools[name][k]
			for range c.Slots {
				outside[name] += c.Executable + packOutputs(&packer, c)
				exe += c.Executable
			}
		}
	}
	return outside, exe, packer.Reserved() - packer.Held()
}

// packOutputs places one slot's outputs and returns what they hold. Costs
// without their output sizes (an older plan cache) count Outside.
func packOutputs(p *alloc.Packer, c CaptureCost) int64 {
	if len(c.Outputs) == 0 {
		return c.Outside
	}
	before := p.Held()
	for _, n := range c.Outputs {
		p.Alloc(n)
	}
	return p.Held() - before
}

// compareKeys orders buckets largest first: batch size, then tokens, then
// walk and key.
func compareKeys(a, b BucketKey) int {
	switch {
	case a.BatchSize != b.BatchSize:
		return b.BatchSize - a.BatchSize
	case a.Tokens != b.Tokens:
		return b.Tokens - a.Tokens
	case a.Walk != b.Walk:
		if a.Walk < b.Walk {
			return -1
		}
		return 1
	case a.Key != b.Key:
		if a.Key < b.Key {
			return -1
		}
		return 1
	}
	return 0
}

// AgreePlan keeps only the buckets every rank planned: a bucket captured on
// one rank and not on another would hang the first as soon as its graph holds
// a collective. Candidates are taken in config order, identical everywhere.
func (r *Runner) AgreePlan(ctx context.Context, planned map[BucketKey]bool) (map[BucketKey]bool, error) {
	var order []BucketKey
	for _, c := range r.configs {
		for _, sh := range c.shapes() {
			order = append(order, BucketKey{Walk: c.Walk, BatchSize: sh[0], Tokens: sh[1], Key: c.KeyInfo})
		}
	}
	flags := make([]int64, len(order))
	for i, k := range order {
		if planned[k] {
			flags[i] = 1
		}
	}
	agreed, err := comm.Agree(ctx, r.group, flags, comm.Min)
	if err != nil {
		return nil, err
	}
	out := map[BucketKey]bool{}
	for i, k := range order {
		if agreed[i] == 1 {
			out[k] = true
		}
	}
	return out, nil
}

// OutsideMemory is what the registered buckets hold outside the pool: their
// executables and static outputs.
func (r *Runner) OutsideMemory() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, b := range r.buckets {
		for _, s := range b.Slots {
			n += s.outside
			for _, o := range s.outputs {
				n += r.held(o.Buf)
			}
		}
	}
	return n
}

// blockSizer is an allocator that tells what it holds for a buffer.
type blockSizer interface {
	BlockSize(accel.Buffer) (int64, bool)
}

// held is what the allocator holds for b: its block, or its size rounded
// up where the allocator does not say.
func (r *Runner) held(b accel.Buffer) int64 {
	if bs, ok := r.dev.Allocator().(blockSizer); ok {
		if n, ok := bs.BlockSize(b); ok {
			return n
		}
	}
	return alloc.RoundUp(b.Len())
}

// PoolMemory is the device memory the runner's pool holds now.
func (r *Runner) PoolMemory() int64 { return r.pool.Stats().Reserved }
