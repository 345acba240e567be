package cpu

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/internal/cputime"
)

// Static schedules.
//
// An instantiated graph is known in advance, so its replay is scheduled once,
// at Instantiate (and Update), instead of forking and joining kernel by
// kernel as eager work does. Each kernel's units (matmul panels, attention
// and RoPE heads, KV-cache column bands, elementwise column bands, rows) are
// split into one contiguous range per worker; the unit orders are chosen so
// that these ranges line up across kernels (the panels of the q, k and v
// projections a worker computes are the heads it rotates, writes to the cache
// and attends with). A matmul split by panels over many rows is the
// exception: its workers claim its panels as they come (share.go), so that
// a slower core does not hold the other at the barrier after it. From each piece's footprint (the memory it reads and
// writes, conservatively) the builder inserts a barrier only before a piece
// that reads what another worker wrote since the last barrier, or writes
// what another worker read or wrote: independent kernels, and chains of
// kernels whose data stays with one worker, run between barriers without
// waiting. A small kernel of a single unit whose output does not overlap its
// input (an RMSNorm of one row, an embedding lookup) is run by every worker
// (replicated: each writes the same bits), which saves the barrier a
// single-worker placement would need before its consumers.
//
// A replay publishes the schedule to the pool once; the workers run their
// parts and meet at the barriers (spinning, then yielding), with no
// allocation and no channel hand-off. Every unit is computed by the same
// code in the same order whichever worker runs it, so replays give the same
// bits as eager launches, whatever the number of threads.

// itemKind is what a schedule item does.
type itemKind uint8

const (
	itemKernel itemKind = iota + 1
	itemCopy
	itemSerial // a nested replay: run whole, on worker 0, between barriers
)

type item struct {
	kind   itemKind
	c      *rcall
	lo, hi int
	dst    []byte
	src    []byte
	dm     *mem // segment of dst (copies)
	doff   int64
	rep    bool // run by every worker
	// share: every worker's slot holds this same piece (lo 0, hi the
	// kernel's units), whose units the workers claim in chunks as they
	// come (shareClaim) instead of a fixed half each.
	share *shareClaim
	t     *task // itemSerial
	// reuse: a quantized matmul whose slot runs, just before it, one on
	// the same rows of the same x (builder.reusesActs): it takes that
	// one's quantization of x instead of making its own.
	reuse bool
}

type schedule struct {
	d     *Device
	W     int
	parts [][]item // per worker slot, every phase in order
	ends  [][]int  // per slot, the end of each phase in parts
	np    int      // phases
	job   job
	// claim[ph*W+w] is the number of runs whose slot w of phase ph has been
	// claimed; done[ph] counts the slots of phase ph completed, over every
	// run; busy[ph] is how many slots of phase ph have items.
	claim []atomic.Uint64
	done  []paddedCounter
	busy  []uint64
	runs  uint64 // runs started (the caller's, under the pool's busy lock)
	stats ScheduleStats
	trace *schedTrace // EnvScheduleTrace; nil: no time stamps
}

type paddedCounter struct {
	n atomic.Uint64
	_ [56]byte
}

// ScheduleStats describes a replay's static schedule.
type ScheduleStats struct {
	Workers    int // workers it splits over
	Nodes      int // nodes scheduled
	Barriers   int // barriers per replay (phases less one)
	Replicated int // single-unit kernels every worker runs
	ReusedActs int // quantized matmul pieces that reuse the piece before's quantized x
	Shared     int // matmuls whose panels the workers claim as they come (shareClaim)
}

// replay runs an executable's nodes: on its static schedule across the pool
// when the pool is free, else one node after another on the calling
// goroutine.
func (d *Device) replay(ns *nodes, k *kctx) {
	s := ns.sched
	if s == nil || !d.work.busy.TryLock() {
		for i := range ns.n {
			d.runNodeSerial(&ns.n[i], k)
		}
		return
	}
	j := &s.job
	j.fault.Store(nil)
	// The run's number is set only now that the run starts: a worker that
	// reads it (perhaps late, before seeing the publication) runs this run,
	// whose inputs are in place, and never a later one.
	j.epoch.Store(s.runs)
	d.work.publish(j)
	s.runAll(j, 0, k)
	s.runs++
	if s.trace != nil {
		s.traceReport()
	}
	d.work.busy.Unlock()
	if f := j.fault.Load(); f != nil {
		panic(f.v)
	}
}

// runNodeSerial executes one node on the calling goroutine (kernels may
// still fork and join when the pool is free).
func (d *Device) runNodeSerial(t *task, k *kctx) {
	switch t.kind {
	case taskKernel:
		d.exec(&t.call, k)
	case taskCopy:
		d.packs.written(t.dm, t.doff, int64(len(t.dst)))
		copy(t.dst, t.src)
	case taskReplay:
		d.replay(t.exec, k)
	}
}

// runAll is one goroutine's part in a run: phase by phase, it claims its
// own slot, then any slot nobody has claimed yet (so a worker the system has
// descheduled delays nobody: another runs its share), and waits until every
// slot of the phase is done. A goroutine that arrives after the run has
// finished finds every slot claimed and every phase done, and leaves.
func (s *schedule) runAll(j *job, self int, k *kctx) {
	r := j.epoch.Load()
	tr := s.trace
	if tr != nil {
		// Each phase's items are timed in this thread's CPU time.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	for ph := 0; ph < s.np; ph++ {
		if s.busy[ph] == 0 {
			continue
		}
		var t0, t1 time.Time
		var c0, c1 time.Duration
		if tr != nil {
			t0, c0 = time.Now(), cputime.Thread()
		}
		for i := 0; i < s.W; i++ {
			w := self + i
			if w >= s.W {
				w -= s.W
			}
			start := 0
			if ph > 0 {
				start = s.ends[w][ph-1]
			}
			end := s.ends[w][ph]
			if start == end {
				continue
			}
			c := &s.claim[ph*s.W+w]
			if c.Load() != r || !c.CompareAndSwap(r, r+1) {
				continue
			}
			if j.fault.Load() == nil {
				s.runItems(j, s.parts[w][start:end], k)
			}
			s.done[ph].n.Add(1)
			if tr != nil && w != self && self < len(tr.took) {
				tr.took[self].Add(1)
			}
		}
		if tr != nil {
			t1, c1 = time.Now(), cputime.Thread()
		}
		target := (r + 1) * s.busy[ph]
		for spins := 0; s.done[ph].n.Load() < target; spins++ {
			if spins > 1000 {
				runtime.Gosched()
			}
		}
		if tr != nil {
			tr.note(self, ph, t0, t1, time.Now(), c1-c0)
		}
	}
}

func (s *schedule) runItems(j *job, items []item, k *kctx) {
	defer func() {
		if r := recover(); r != nil {
			j.fault.CompareAndSwap(nil, &faultErr{r})
		}
	}()
	d := s.d
	for i := range items {
		it := &items[i]
		switch it.kind {
		case itemKernel:
			d.noteWrites(it.c)
			if it.share != nil {
				runShared(j, it, k)
				continue
			}
			if !it.reuse {
				// What k holds was made before this slot or by an
				// item that a later one may not trust.
				k.qa.forget()
			}
			k.reuseActs = it.reuse
			kernels[it.c.op].run(it.c, it.lo, it.hi, k)
			k.reuseActs = false
		case itemCopy:
			d.packs.written(it.dm, it.doff, int64(len(it.dst)))
			if it.rep {
				copyBytes(it.dst, it.src) // every worker writes it: see copyF32
			} else {
				copy(it.dst, it.src)
			}
		case itemSerial:
			d.runNodeSerial(it.t, k)
		}
	}
}

// region is the bytes {base + r*stride + c : r in [0,rows), c in [c0,c1)}:
// a band of columns of a row-major tensor, or (rows 1) a contiguous range.
type region struct {
	base   uintptr
	rows   int
	stride uintptr
	c0, c1 uintptr
}

func (r region) lo() uintptr { return r.base + r.c0 }
func (r region) hi() uintptr { return r.base + uintptr(r.rows-1)*r.stride + r.c1 }

// overlaps is exact for two bands of one row grid and for contiguous ranges,
// and conservative otherwise.
func (a region) overlaps(b region) bool {
	if a.hi() <= b.lo() || b.hi() <= a.lo() {
		return false
	}
	if a.rows > 1 && b.rows > 1 && a.stride == b.stride && a.c1 <= a.stride && b.c1 <= b.stride {
		st := int64(a.stride)
		diff := int64(a.base) - int64(b.base)
		if diff%st == 0 {
			dr := int(diff / st) // a's row 0 is b's row dr
			if max(dr, 0) >= min(dr+a.rows, b.rows) {
				return false
			}
			return a.c0 < b.c1 && b.c0 < a.c1
		}
	}
	return true
}

// footprint is what a piece of work reads and writes.
type footprint struct{ r, w []region }

func (f *footprint) reset() { f.r, f.w = f.r[:0], f.w[:0] }

func addr(o *operand) uintptr { return uintptr(unsafe.Pointer(&o.b[0])) }

func rowBytes(o *operand) uintptr { return uintptr(o.dt.RowBytes(o.cols)) }

// rowsOf is rows [r0, r1) of o.
func rowsOf(o *operand, r0, r1 int) (region, bool) {
	r1 = min(r1, o.rows)
	if len(o.b) == 0 || r1 <= r0 || o.cols == 0 {
		return region{}, false
	}
	rb := rowBytes(o)
	return region{base: addr(o) + uintptr(r0)*rb, rows: r1 - r0, stride: rb, c0: 0, c1: rb}, true
}

// colsOf is element columns [c0, c1) of every row of o.
func colsOf(o *operand, c0, c1 int) (region, bool) {
	c1 = min(c1, o.cols)
	if len(o.b) == 0 || c1 <= c0 || o.rows == 0 {
		return region{}, false
	}
	es := uintptr(o.dt.Size())
	return region{base: addr(o), rows: o.rows, stride: rowBytes(o), c0: uintptr(c0) * es, c1: uintptr(c1) * es}, true
}

// elemsOf is flat elements [i0, i1) of o.
func elemsOf(o *operand, i0, i1 int) (region, bool) {
	i1 = min(i1, o.rows*o.cols)
	if len(o.b) == 0 || i1 <= i0 {
		return region{}, false
	}
	es := uintptr(o.dt.Size())
	return region{base: addr(o), rows: 1, c0: uintptr(i0) * es, c1: uintptr(i1) * es}, true
}

func (f *footprint) read(r region, ok bool) {
	if ok {
		f.r = append(f.r, r)
	}
}

func (f *footprint) write(r region, ok bool) {
	if ok {
		f.w = append(f.w, r)
	}
}

func (f *footprint) readAll(o *operand) { f.read(rowsOf(o, 0, o.rows)) }

func footFill(c *rcall, lo, hi int, f *footprint) { f.write(rowsOf(&c.o[0], lo, hi)) }

func footEmbed(c *rcall, lo, hi int, f *footprint) {
	f.readAll(&c.o[1])
	f.readAll(&c.o[2])
	f.write(rowsOf(&c.o[0], lo, hi))
}

func footRMSNorm(c *rcall, lo, hi int, f *footprint) {
	f.read(rowsOf(&c.o[1], lo, hi))
	f.readAll(&c.o[2])
	f.write(rowsOf(&c.o[0], lo, hi))
}

func footMatMul(c *rcall, lo, hi int, f *footprint) {
	p0, p1, t0, t1 := matUnits(c, lo, hi)
	f.read(rowsOf(&c.o[1], t0, t1))
	f.read(rowsOf(&c.o[2], p0*matBlock, p1*matBlock))
	if matRowSplit(c) {
		f.write(rowsOf(&c.o[0], t0, t1))
		return
	}
	f.write(colsOf(&c.o[0], p0*matBlock, p1*matBlock))
}

// unitHeads is the heads units [lo, hi) of a head-major split over T tokens
// touch (whole heads, conservatively).
func unitHeads(lo, hi, T int) (int, int) {
	if T <= 0 || hi <= lo {
		return 0, 0
	}
	return lo / T, (hi-1)/T + 1
}

// unitTokens is the tokens units [lo, hi) of a token-major split over H
// heads touch.
func unitTokens(lo, hi, H int) (int, int) {
	if H <= 0 || hi <= lo {
		return 0, 0
	}
	return lo / H, (hi-1)/H + 1
}

func footRoPE(c *rcall, lo, hi int, f *footprint) {
	hd, nq, nk, group := ropeHeads(c)
	q, k := &c.o[0], &c.o[1]
	f.readAll(&c.o[2])
	if c.op == accel.OpRoPETable {
		f.readAll(&c.o[3])
	}
	if T := q.rows; rowSplit(T) {
		t0, t1 := unitTokens(lo, hi, ropeUnitHeads(c))
		for _, o := range []*operand{q, k} {
			r, ok := rowsOf(o, t0, t1)
			f.read(r, ok)
			f.write(r, ok)
		}
		return
	}
	h0, h1 := unitHeads(lo, hi, c.o[0].rows)
	if r, ok := colsOf(q, h0*hd, min(h1, nq)*hd); ok {
		f.read(r, ok)
		f.write(r, ok)
	}
	g0, g1 := (h0+group-1)/group, min((h1+group-1)/group, nk)
	if r, ok := colsOf(k, g0*hd, g1*hd); ok {
		f.read(r, ok)
		f.write(r, ok)
	}
}

func footKV(c *rcall, lo, hi int, f *footprint) {
	if T := c.o[2].rows; rowSplit(T) {
		t0, t1 := unitTokens(lo, hi, kvBands(c))
		f.read(rowsOf(&c.o[2], t0, t1))
		f.read(rowsOf(&c.o[3], t0, t1))
		f.readAll(&c.o[4])
		f.write(rowsOf(&c.o[0], 0, c.o[0].rows))
		f.write(rowsOf(&c.o[1], 0, c.o[1].rows))
		return
	}
	b0, b1 := unitHeads(lo, hi, c.o[2].rows)
	c0, c1 := b0*panelWidth, b1*panelWidth
	f.read(colsOf(&c.o[2], c0, c1))
	f.read(colsOf(&c.o[3], c0, c1))
	f.readAll(&c.o[4])
	f.write(colsOf(&c.o[0], c0, c1))
	f.write(colsOf(&c.o[1], c0, c1))
}

func footAttention(c *rcall, lo, hi int, f *footprint) {
	nh, nkv, hd := c.i[0], c.i[1], c.i[2]
	group := nh / nkv
	h0, h1 := unitHeads(lo, hi, c.o[1].rows)
	f.read(colsOf(&c.o[1], h0*hd, h1*hd))
	g0, g1 := h0/group, (h1-1)/group+1
	f.read(colsOf(&c.o[2], g0*hd, g1*hd))
	f.read(colsOf(&c.o[3], g0*hd, g1*hd))
	f.readAll(&c.o[4])
	f.readAll(&c.o[5])
	f.readAll(&c.o[6])
	f.write(colsOf(&c.o[0], h0*hd, h1*hd))
}

func footElem(c *rcall, lo, hi int, f *footprint) {
	ins := c.o[1:3]
	if c.op == accel.OpAddRow {
		f.readAll(&c.o[2]) // the row every row adds
		ins = c.o[1:2]
	}
	bands, rows := elemShape(c)
	switch {
	case rows:
		for i := range ins {
			f.read(rowsOf(&ins[i], lo, hi))
		}
		f.write(rowsOf(&c.o[0], lo, hi))
	case bands:
		c0, c1 := lo*panelWidth, hi*panelWidth
		for i := range ins {
			f.read(colsOf(&ins[i], c0, c1))
		}
		f.write(colsOf(&c.o[0], c0, c1))
	default:
		i0, i1 := lo*flatChunk, hi*flatChunk
		for i := range ins {
			f.read(elemsOf(&ins[i], i0, i1))
		}
		f.write(elemsOf(&c.o[0], i0, i1))
	}
}

func footGather(c *rcall, lo, hi int, f *footprint) {
	f.readAll(&c.o[1])
	f.readAll(&c.o[2])
	f.write(rowsOf(&c.o[0], lo, hi))
}

func footArgmax(c *rcall, lo, hi int, f *footprint) {
	f.read(rowsOf(&c.o[1], lo, hi))
	f.write(elemsOf(&c.o[0], lo, hi))
}

func footLogProbs(c *rcall, lo, hi int, f *footprint) {
	f.read(rowsOf(&c.o[2], lo, hi))
	f.read(elemsOf(&c.o[3], lo, hi))
	f.write(rowsOf(&c.o[0], lo, hi))
	f.write(rowsOf(&c.o[1], lo, hi))
}

func footSample(c *rcall, lo, hi int, f *footprint) {
	f.read(rowsOf(&c.o[1], lo, hi))
	for i := 2; i <= 6; i++ {
		f.readAll(&c.o[i])
	}
	f.write(elemsOf(&c.o[0], lo, hi))
}

// replicateMax is the most work (multiply-adds) of a single-unit kernel the
// schedule runs on every worker rather than on one.
const replicateMax = 1 << 15

// builder makes a schedule.
type builder struct {
	s       *schedule
	W       int
	written [][]region // per worker, since the last barrier
	read    [][]region
	rep     []region // written by replicated kernels since the last barrier
	cost    []int    // per worker, in the current phase
	empty   bool     // the current phase has no items
	f       footprint
	parts   []footprint
}

func anyOverlap(a, b []region) bool {
	for i := range a {
		for j := range b {
			if a[i].overlaps(b[j]) {
				return true
			}
		}
	}
	return false
}

// buildSchedule makes the static schedule of resolved nodes over the pool.
func buildSchedule(d *Device, ts []task) *schedule {
	W := d.threads
	if W <= 1 || d.work.n != W-1 || len(ts) == 0 {
		return nil
	}
	s := &schedule{d: d, W: W, parts: make([][]item, W), ends: make([][]int, W)}
	s.job.sched = s
	b := &builder{s: s, W: W, written: make([][]region, W), read: make([][]region, W),
		cost: make([]int, W), empty: true, parts: make([]footprint, W)}
	for i := range ts {
		t := &ts[i]
		switch t.kind {
		case taskKernel:
			b.kernel(&t.call)
		case taskCopy:
			b.copyNode(t)
		case taskReplay:
			b.barrier()
			s.parts[0] = append(s.parts[0], item{kind: itemSerial, t: t})
			b.empty = false
			b.barrier()
		default:
			return nil
		}
	}
	b.barrier()
	s.np = len(s.ends[0])
	s.claim = make([]atomic.Uint64, s.np*W)
	s.done = make([]paddedCounter, s.np)
	s.busy = make([]uint64, s.np)
	for ph := 0; ph < s.np; ph++ {
		for w := 0; w < W; w++ {
			start := 0
			if ph > 0 {
				start = s.ends[w][ph-1]
			}
			if s.ends[w][ph] > start {
				s.busy[ph]++
			}
		}
	}
	if d.traceEvery > 0 {
		s.trace = newSchedTrace(d.traceEvery, W, s.np)
	}
	s.stats.Workers, s.stats.Nodes, s.stats.Barriers = W, len(ts), max(s.np-1, 0)
	return s
}

// barrier closes the current phase.
func (b *builder) barrier() {
	if b.empty {
		return
	}
	for w := 0; w < b.W; w++ {
		b.s.ends[w] = append(b.s.ends[w], len(b.s.parts[w]))
		b.written[w], b.read[w] = b.written[w][:0], b.read[w][:0]
		b.cost[w] = 0
	}
	b.rep = b.rep[:0]
	b.empty = true
}

// conflicts reports whether worker w running a piece of footprint f now
// would race with what the other workers did since the last barrier.
func (b *builder) conflicts(w int, f *footprint) bool {
	if anyOverlap(f.w, b.rep) {
		return true
	}
	for v := 0; v < b.W; v++ {
		if v == w {
			continue
		}
		if anyOverlap(f.r, b.written[v]) || anyOverlap(f.w, b.written[v]) || anyOverlap(f.w, b.read[v]) {
			return true
		}
	}
	return false
}

func (b *builder) add(w int, it item, f *footprint, cost int) {
	if it.kind == itemKernel && b.reusesActs(w, &it) {
		it.reuse = true
		b.s.stats.ReusedActs++
	}
	b.s.parts[w] = append(b.s.parts[w], it)
	b.read[w] = append(b.read[w], f.r...)
	b.written[w] = append(b.written[w], f.w...)
	b.cost[w] += cost
	b.empty = false
}

func (b *builder) kernel(c *rcall) {
	kn := &kernels[c.op]
	n, cost := kn.units(c)
	if n <= 0 {
		return
	}
	if n == 1 || b.W == 1 {
		f := &b.f
		f.reset()
		kn.foot(c, 0, n, f)
		b.single(itemKernel, c, f, n*cost, nil)
		return
	}
	if shareable(c, n, b.W) {
		b.shared(c, n, cost)
		return
	}
	conflict := false
	for w := 0; w < b.W; w++ {
		p := &b.parts[w]
		p.reset()
		lo, hi := n*w/b.W, n*(w+1)/b.W
		if lo < hi {
			kn.foot(c, lo, hi, p)
			if b.conflicts(w, p) {
				conflict = true
			}
		}
	}
	if conflict {
		b.barrier()
	}
	for w := 0; w < b.W; w++ {
		lo, hi := n*w/b.W, n*(w+1)/b.W
		if lo < hi {
			b.add(w, item{kind: itemKernel, c: c, lo: lo, hi: hi}, &b.parts[w], (hi-lo)*cost)
		}
	}
}

// reusesActs reports whether the kernel piece it, next in worker w's slot of
// the current phase, may reuse the quantization of x that the piece before
// it there made: both are quantized matmuls over the same rows of the same
// x in the same numerics (Q8_K or Q8_0), and the one before does not write
// x. A slot runs its pieces in order on one goroutine, and within a phase
// no other worker writes what this one reads (a barrier would have come
// between), so x holds the same values for both.
func (b *builder) reusesActs(w int, it *item) bool {
	start := 0
	if e := b.s.ends[w]; len(e) > 0 {
		start = e[len(e)-1]
	}
	p := b.s.parts[w]
	if len(p) <= start {
		return false
	}
	prev := &p[len(p)-1]
	// (A shared piece follows only a shared one: a goroutine that ran none
	// of the first's chunks holds no quantization of its x, which
	// runShared then forgets, and otherwise holds one of every row.)
	if prev.kind != itemKernel || prev.rep || it.rep || (prev.share == nil) != (it.share == nil) ||
		!quantMatMul(prev.c) || !quantMatMul(it.c) {
		return false
	}
	x, px := &it.c.o[1], &prev.c.o[1]
	if len(x.b) == 0 || len(px.b) == 0 || &x.b[0] != &px.b[0] || x.rows != px.rows || x.cols != px.cols ||
		kBlocks(it.c.o[2].dt) != kBlocks(prev.c.o[2].dt) {
		return false
	}
	_, _, t0, t1 := matUnits(it.c, it.lo, it.hi)
	_, _, pt0, pt1 := matUnits(prev.c, prev.lo, prev.hi)
	xr, _ := rowsOf(x, 0, x.rows)
	yr, ok := rowsOf(&prev.c.o[0], 0, prev.c.o[0].rows)
	return t0 == pt0 && t1 == pt1 && !(ok && yr.overlaps(xr))
}

// quantMatMul reports whether c is a MatMul of quantized weights.
func quantMatMul(c *rcall) bool {
	return c != nil && c.op == accel.OpMatMul && c.o[2].dt.BlockSize() > 1
}

// single places a one-unit piece: on every worker when it is small and its
// output does not overlap its input, else on the least loaded worker that
// can run it without a barrier (after a barrier when none can).
func (b *builder) single(kind itemKind, c *rcall, f *footprint, cost int, t *task) {
	it := item{kind: kind, c: c, lo: 0, hi: 1}
	if t != nil {
		it.dst, it.src, it.dm, it.doff = t.dst, t.src, t.dm, t.doff
	}
	best := -1
	for w := 0; w < b.W; w++ {
		if !b.conflicts(w, f) && (best < 0 || b.cost[w] < b.cost[best]) {
			best = w
		}
	}
	if cost <= replicateMax && !anyOverlap(f.w, f.r) && replicable(c) {
		conflict := anyOverlap(f.w, b.rep)
		for v := 0; v < b.W && !conflict; v++ {
			conflict = anyOverlap(f.r, b.written[v]) || anyOverlap(f.w, b.written[v]) || anyOverlap(f.w, b.read[v])
		}
		if conflict && best >= 0 {
			// Replicated, it would wait for the other workers; on a
			// worker that can run it now it waits for nobody (the
			// copy of a token that worker sampled), and a consumer on
			// another worker needs at most the one barrier that
			// replicating would have taken here.
			b.add(best, it, f, cost)
			return
		}
		if conflict {
			b.barrier()
		}
		it.rep = true
		for w := 0; w < b.W; w++ {
			b.s.parts[w] = append(b.s.parts[w], it)
			b.read[w] = append(b.read[w], f.r...)
			b.cost[w] += cost
		}
		b.rep = append(b.rep, f.w...)
		b.empty = false
		b.s.stats.Replicated++
		return
	}
	if best < 0 {
		b.barrier()
		best = 0
	}
	b.add(best, it, f, cost)
}

// replicable reports whether every worker may run c's one piece at once:
// the quantized matmuls' many-row kernels clear their outputs and add into
// them block by block, so two workers running the same panel would mix
// their partial sums. (Copies, c nil, write each byte once.)
func replicable(c *rcall) bool {
	return c == nil || c.op != accel.OpMatMul || c.o[2].dt.BlockSize() == 1
}

// copyMin is the size from which a copy node is split across the workers.
const copyMin = 256 << 10

func (b *builder) copyNode(t *task) {
	n := len(t.dst)
	if n == 0 {
		return
	}
	region := func(p []byte, lo, hi int) region {
		return region{base: uintptr(unsafe.Pointer(&p[0])), rows: 1, c0: uintptr(lo), c1: uintptr(hi)}
	}
	if n < copyMin {
		f := &b.f
		f.reset()
		f.r = append(f.r, region(t.src, 0, n))
		f.w = append(f.w, region(t.dst, 0, n))
		b.single(itemCopy, nil, f, n/4, t)
		return
	}
	conflict := false
	for w := 0; w < b.W; w++ {
		p := &b.parts[w]
		p.reset()
		lo, hi := n*w/b.W, n*(w+1)/b.W
		p.r = append(p.r, region(t.src, lo, hi))
		p.w = append(p.w, region(t.dst, lo, hi))
		if b.conflicts(w, p) {
			conflict = true
		}
	}
	if conflict {
		b.barrier()
	}
	for w := 0; w < b.W; w++ {
		lo, hi := n*w/b.W, n*(w+1)/b.W
		it := item{kind: itemCopy, dst: t.dst[lo:hi], src: t.src[lo:hi], dm: t.dm, doff: t.doff + int64(lo)}
		b.add(w, it, &b.parts[w], (hi-lo)/4)
	}
}

// String lists the schedule's phases, each worker's pieces in order.
func (s *schedule) String() string {
	var b strings.Builder
	for ph := 0; ph < s.np; ph++ {
		fmt.Fprintf(&b, "phase %2d:", ph)
		for w := 0; w < s.W; w++ {
			start := 0
			if ph > 0 {
				start = s.ends[w][ph-1]
			}
			b.WriteString(" |")
			for _, it := range s.parts[w][start:s.ends[w][ph]] {
				switch it.kind {
				case itemKernel:
					fmt.Fprintf(&b, " %s[%d,%d)", it.c.op, it.lo, it.hi)
				case itemCopy:
					fmt.Fprintf(&b, " copy(%d)", len(it.dst))
				case itemSerial:
					b.WriteString(" replay")
				}
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}
