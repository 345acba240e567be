package cpu

import (
	"sync/atomic"

	"github.com/reprise-ml/reprise/accel"
)

// Shared pieces: a matmul whose panels the workers claim as they come.
//
// A static schedule splits each kernel's units into fixed halves, which
// costs a step the difference between its workers' rates: on a shared
// machine two cores seldom run at one speed (on a 2-core AMD EPYC VM the
// trace of a 110M Q4_K_M 512-token prefill showed 48-55 ms of 520 in which
// the faster worker waited for the slower, docs/BENCH.md). Where a matmul
// splits by output panels over many rows (a prefill's, or a batch's
// float32 matmul too big to split by rows), it is instead placed in every
// worker's slot whole, and the workers take its panels a chunk at a time
// from one counter, large chunks first and smaller ones as the panels run
// out (guided self-scheduling), so that both finish within about a chunk of
// each other. Every panel is computed by the same code over the same rows
// whichever worker takes it, so the bits are the static split's. Its
// footprint is the whole matmul in every worker's part, so that the builder
// puts a barrier between it and anything that reads or writes what it
// touches. Matmuls over few rows keep their static split: they are bound by
// reading weights, and their panels line up with the heads and bands of
// the kernels after them in the same worker's slot, without a barrier.

// shareMinRows is the fewest rows of x for which a panel-split matmul is
// shared: below rowSplitMin a matmul splits by panels to read its weights
// once and chains into the next kernels without a barrier.
const shareMinRows = rowSplitMin

// shareGrainFor is the panels a claim of matmul c takes a multiple of: the
// float32 and bf16 kernels' register block's panels (P; a chunk that is not
// whole blocks runs its rest on smaller blocks with fewer accumulators),
// and one panel for the quantized kernels, which run panel by panel.
func shareGrainFor(c *rcall) int {
	vk := simdOps()
	if c.o[2].dt.BlockSize() > 1 || !vk.hasMM() {
		return 1
	}
	if c.o[2].dt == accel.BF16 {
		return max(1, vk.blocks.bf16[1])
	}
	return max(1, vk.blocks.f32[1])
}

// shareable reports whether the schedule shares matmul c of n panel units
// among W workers.
func shareable(c *rcall, n, W int) bool {
	return c.op == accel.OpMatMul && !matRowSplit(c) && c.o[1].rows >= shareMinRows && n >= 4*W
}

// shareClaim hands out a shared piece's units [0, n) in chunks. v holds the
// run's number (low 32 bits) in its top half and the next unclaimed unit in
// its bottom half: the first claim of a run finds an older run's number and
// starts from unit 0, so nothing needs resetting between runs. (Only the
// goroutines running run r touch v during it: a slot is run once claimed
// for r, and run r+1 starts after every slot of run r is done.)
type shareClaim struct {
	v     atomic.Uint64
	n     int
	W     int
	grain int
	_     [32]byte // v alone on its cache line among claims
}

// claim takes the next chunk of run r: units [lo, hi), or ok false once
// every unit is taken.
func (s *shareClaim) claim(r uint64) (lo, hi int, ok bool) {
	tag := r & 0xffffffff
	for {
		v := s.v.Load()
		next := 0
		if v>>32 == tag {
			next = int(v & 0xffffffff)
		}
		if next >= s.n {
			return 0, 0, false
		}
		// Guided: half of an even share of what is left, whole grains.
		c := max(s.grain, (s.n-next)/(2*s.W))
		hi = min(s.n, next+(c+s.grain-1)/s.grain*s.grain)
		if s.v.CompareAndSwap(v, tag<<32|uint64(hi)) {
			return next, hi, true
		}
	}
}

// shared places matmul c's n units in every worker's slot as one shared
// piece, after a barrier if anything since the last one reads or writes
// what it does (any worker may run any of its chunks).
func (b *builder) shared(c *rcall, n, cost int) {
	f := &b.f
	f.reset()
	kernels[c.op].foot(c, 0, n, f)
	conflict := anyOverlap(f.w, b.rep)
	for v := 0; v < b.W && !conflict; v++ {
		conflict = anyOverlap(f.r, b.written[v]) || anyOverlap(f.w, b.written[v]) || anyOverlap(f.w, b.read[v])
	}
	if conflict {
		b.barrier()
	}
	sh := &shareClaim{n: n, W: b.W, grain: shareGrainFor(c)}
	for w := 0; w < b.W; w++ {
		b.add(w, item{kind: itemKernel, c: c, lo: 0, hi: n, share: sh}, f, n*cost/b.W)
	}
	b.s.stats.Shared++
}

// runShared is one goroutine's part of a shared piece: chunks until none
// is left. The first reuses the quantization of x that the piece before
// left where the builder says it may (it.reuse: a shared piece on the same
// rows of the same x, just before it in the slot); the chunks after it
// reuse the first's (the same rows of the same x: a panel split covers
// every row). A goroutine that gets no chunk forgets what it holds: it
// made no quantization of this piece's x for the next piece to reuse.
func runShared(j *job, it *item, k *kctx) {
	r := j.epoch.Load()
	if !it.reuse {
		k.qa.forget()
	}
	ran := false
	for {
		lo, hi, ok := it.share.claim(r)
		if !ok {
			break
		}
		k.reuseActs = it.reuse || ran
		kernels[it.c.op].run(it.c, lo, hi, k)
		ran = true
	}
	k.reuseActs = false
	if !ran {
		k.qa.forget()
	}
}
