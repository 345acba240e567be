package engine

import (
	"errors"
	"fmt"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/alloc"
	"github.com/reprise-ml/reprise/graph"
)

// KVName is the KV cache resource's name.
const KVName = "kv"

// SinkPage is the KV page padding rows write into. It is reserved when the
// cache is made and never given to a request, so padding never competes with
// real requests for storage and never writes into theirs.
const SinkPage = 0

// errKVFull: the cache cannot promise a request the pages it may need.
var errKVFull = errors.New("kv cache full")

// kvConfig shapes a paged KV cache.
type kvConfig struct {
	Layers   int
	KVDim    int         // KV heads × head size
	PageSize int         // positions per page
	Pages    int         // pages including the sink
	MaxLen   int         // positions a request may hold
	DType    accel.DType // the K and V tensors' element type (F32 or F16)
}

// kvCache is the paged KV cache: per layer a K and a V tensor of Pages ×
// PageSize slots, pages handed to requests as their positions need them.
// A request is promised, when it is ingested, the pages its MaxLen may need,
// so a running request never fails to grow: requests that do not fit wait.
type kvCache struct {
	cfg  kvConfig
	ppr  int // page-table width: pages a request may hold
	K, V []accel.Tensor
	free []int32
	reqs map[int64]*kvState
	owed int // pages promised to requests and not yet allocated
	// refs counts each page's holders: more than one when requests share
	// a prompt's pages (fork); a page is free again at none.
	refs   []int32
	slots  *slotTensors
	layerB int64
}

type kvState struct {
	pages   []int32
	next    int // positions admitted
	promise int // pages promised at ingest (real requests)
	allocs  int // pages allocated by the row itself (not shared to it)
	// copying: a fork's first page of its own (copyTo) is still to be
	// copied from the page it shares its first positions with (copyFrom),
	// which the fork's first plan does.
	copying          bool
	copyFrom, copyTo int32
	padding          bool
}

// kvRecord is what a step admitted, to roll back.
type kvRecord struct {
	start, count []int
	added        [][]int32
}

// KVPlan is what the forward reads: the slot of each token (where its K and
// V go; -1 for a bucket's tail) and each row's page table.
type KVPlan struct {
	Slots    accel.Tensor // [1, T] I32
	Pages    accel.Tensor // [bs, pages per row] I32
	PageSize int
	K, V     []accel.Tensor
}

// newKVCache allocates the cache on dev.
func newKVCache(dev accel.Device, cfg kvConfig) (*kvCache, error) {
	if cfg.DType == 0 {
		cfg.DType = accel.F32
	}
	if cfg.Layers < 1 || cfg.KVDim < 1 || cfg.PageSize < 1 || cfg.Pages < 2 || cfg.MaxLen < 1 || cfg.DType.Size() == 0 {
		return nil, fmt.Errorf("kv: bad config %+v (need at least one page besides the sink)", cfg)
	}
	c := &kvCache{cfg: cfg, ppr: (cfg.MaxLen + cfg.PageSize - 1) / cfg.PageSize, reqs: map[int64]*kvState{},
		slots: newSlotTensors(dev)}
	if err := c.alloc(dev); err != nil {
		return nil, err
	}
	return c, nil
}

// alloc allocates the K and V tensors of cfg.Pages pages and frees every
// page but the sink.
func (c *kvCache) alloc(dev accel.Device) error {
	cfg := c.cfg
	slots := cfg.Pages * cfg.PageSize
	c.layerB = int64(slots) * int64(cfg.KVDim) * cfg.DType.Size()
	for l := 0; l < cfg.Layers; l++ {
		for _, dst := range []*[]accel.Tensor{&c.K, &c.V} {
			b, err := dev.Alloc(c.layerB)
			if err != nil {
				c.Close(dev)
				return fmt.Errorf("kv: %d pages of %d positions × %d layers: %w", cfg.Pages, cfg.PageSize, cfg.Layers, err)
			}
			*dst = append(*dst, accel.Tensor{Buf: b, DType: cfg.DType, Rows: slots, Cols: cfg.KVDim})
		}
	}
	for p := int32(cfg.Pages - 1); p > SinkPage; p-- {
		c.free = append(c.free, p)
	}
	c.refs = make([]int32, cfg.Pages)
	return nil
}

// kvPagesWithin is the most pages, at most want, whose K and V tensors the
// allocator can place within budget bytes: the tensors are allocated one per
// layer and kind, and the allocator rounds each to its segments and packs
// small ones together (alloc.Packer predicts where), so pages × page bytes
// alone can be up to a segment per tensor short.
func kvPagesWithin(budget int64, want, layers, pageSize, kvdim int, dt accel.DType) int {
	reserved := func(pages int) int64 {
		var p alloc.Packer
		for range 2 * layers {
			p.Alloc(int64(pages*pageSize) * int64(kvdim) * dt.Size())
		}
		return p.Reserved()
	}
	pageBytes := 2 * int64(layers) * int64(pageSize) * int64(kvdim) * dt.Size()
	hi := int(min(int64(want), budget/pageBytes))
	if hi <= 0 || reserved(hi) <= budget {
		return hi
	}
	lo := 0 // reserved(lo) <= budget, reserved(hi) > budget
	for hi-lo > 1 {
		if mid := (lo + hi) / 2; reserved(mid) <= budget {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// PageBytes is the device memory one page takes over every layer.
func (c *kvCache) PageBytes() int64 {
	return 2 * int64(c.cfg.Layers) * int64(c.cfg.PageSize) * int64(c.cfg.KVDim) * c.cfg.DType.Size()
}

// resize gives the cache pages (the sink included). No row may hold a page.
func (c *kvCache) resize(dev accel.Device, pages int) error {
	if c.UsedPages() != 0 || c.owed != 0 {
		return fmt.Errorf("kv: resize with %d pages in use and %d promised", c.UsedPages(), c.owed)
	}
	if pages < 2 {
		return fmt.Errorf("kv: resize to %d pages (need at least one besides the sink)", pages)
	}
	for _, t := range append(c.K, c.V...) {
		_ = dev.Free(t.Buf)
	}
	c.K, c.V, c.free = nil, nil, nil
	c.cfg.Pages = pages
	return c.alloc(dev)
}

// Close frees the cache and its per-slot plan buffers.
func (c *kvCache) Close(dev accel.Device) {
	for _, t := range append(c.K, c.V...) {
		_ = dev.Free(t.Buf)
	}
	c.K, c.V = nil, nil
	c.slots.free()
}

// Config is the cache's shape.
func (c *kvCache) Config() kvConfig { return c.cfg }

// Bytes is the device memory the cache holds.
func (c *kvCache) Bytes() int64 { return 2 * int64(c.cfg.Layers) * c.layerB }

// PagesFor is the pages n positions need.
func (c *kvCache) PagesFor(n int) int { return (n + c.cfg.PageSize - 1) / c.cfg.PageSize }

// FreePages is the pages neither allocated nor promised.
func (c *kvCache) FreePages() int { return len(c.free) - c.owed }

// UsedPages is the pages allocated to requests (not the sink).
func (c *kvCache) UsedPages() int { return c.cfg.Pages - 1 - len(c.free) }

// Fits reports whether a request of maxLen positions could ever fit.
func (c *kvCache) Fits(maxLen int) bool {
	return maxLen <= c.cfg.MaxLen && c.PagesFor(maxLen) <= c.cfg.Pages-1
}

func (c *kvCache) Name() string        { return KVName }
func (c *kvCache) DependsOn() []string { return []string{PositionsName} }

// Ingest opens a row. A real request is promised the pages its MaxLen may
// need, or refused with errKVFull.
func (c *kvCache) Ingest(id int64, info requestInfo) error {
	if _, dup := c.reqs[id]; dup {
		return fmt.Errorf("kv: row %d already open", id)
	}
	st := &kvState{padding: graph.IsPadding(id)}
	if info.Fork != nil {
		return c.ingestFork(id, st, info)
	}
	if !st.padding {
		if info.MaxLen > c.cfg.MaxLen {
			return fmt.Errorf("kv: request of %d positions, the cache holds %d per request", info.MaxLen, c.cfg.MaxLen)
		}
		st.promise = c.PagesFor(info.MaxLen)
		if st.promise > c.FreePages() {
			return fmt.Errorf("kv: %d pages for %d positions, %d free: %w", st.promise, info.MaxLen, c.FreePages(), errKVFull)
		}
		c.owed += st.promise
	}
	c.reqs[id] = st
	return nil
}

func (c *kvCache) release(st *kvState) {
	for _, p := range st.pages {
		c.unref(p)
	}
	if st.copying { // a fork released before its first plan
		c.unref(st.copyFrom)
		st.copying = false
	}
	c.owed -= max(0, st.promise-st.allocs)
	st.promise, st.allocs = 0, 0
	st.pages = nil
}

// take gives a free page to a row (one holder).
func (c *kvCache) take() int32 {
	p := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	c.refs[p] = 1
	return p
}

// unref drops one holder of p, freeing it at none.
func (c *kvCache) unref(p int32) {
	if c.refs[p]--; c.refs[p] <= 0 {
		c.refs[p] = 0
		c.free = append(c.free, p)
	}
}

func (c *kvCache) Remove(id int64) error {
	if st, ok := c.reqs[id]; ok {
		c.release(st)
		delete(c.reqs, id)
	}
	return nil
}

// Reset returns a row to position 0; with free its pages go back.
func (c *kvCache) Reset(id int64, free bool) error {
	st, ok := c.reqs[id]
	if !ok {
		return nil
	}
	st.next = 0
	if free {
		c.release(st)
	}
	return nil
}

// Admit gives each row the pages its new positions need. Padding rows get
// none, they write into the sink, except in a capture, where they hold
// capture-time pages released after capture.
func (c *kvCache) Admit(step *Step) (admitStatus, int) {
	need, extra := 0, 0
	for _, r := range step.Rows {
		st, ok := c.reqs[r.ID]
		if !ok {
			return admitAllocFailed, 0
		}
		if atRest(r.ID, step) {
			continue
		}
		if st.next+len(r.Tokens) > c.cfg.MaxLen {
			return admitAllocFailed, 0
		}
		want := c.PagesFor(st.next + len(r.Tokens))
		if n := want - len(st.pages); n > 0 {
			need += n
			// Pages past a request's promise (and a capture's padding
			// rows) must come from what nobody was promised.
			if e := st.allocs + n - max(st.promise, st.allocs); e > 0 {
				extra += e
			}
		}
	}
	if free := len(c.free) - c.owed; extra > free || need > len(c.free) {
		return admitAllocFailed, max(extra-free, need-len(c.free))
	}
	rec := &kvRecord{start: make([]int, len(step.Rows)), count: make([]int, len(step.Rows)), added: make([][]int32, len(step.Rows))}
	for i, r := range step.Rows {
		st := c.reqs[r.ID]
		rec.start[i], rec.count[i] = st.next, len(r.Tokens)
		if atRest(r.ID, step) {
			continue
		}
		st.next += len(r.Tokens)
		for len(st.pages) < c.PagesFor(st.next) {
			p := c.take()
			st.pages = append(st.pages, p)
			rec.added[i] = append(rec.added[i], p)
			if st.allocs++; st.allocs <= st.promise {
				c.owed--
			}
		}
	}
	step.State[KVName] = rec
	return admitOK, 0
}

func (c *kvCache) Unadmit(step *Step) {
	rec, ok := step.State[KVName].(*kvRecord)
	if !ok {
		return
	}
	for i, r := range step.Rows {
		st, ok := c.reqs[r.ID]
		if !ok {
			continue
		}
		if n := len(rec.added[i]); n > 0 {
			for k := 0; k < n; k++ {
				if st.allocs <= st.promise {
					c.owed++
				}
				st.allocs--
				st.pages = st.pages[:len(st.pages)-1]
			}
			for _, p := range rec.added[i] {
				c.unref(p)
			}
		}
		if !atRest(r.ID, step) {
			st.next = rec.start[i]
		}
	}
	delete(step.State, KVName)
}

// Plan writes each token's slot (padding rows at rest: the sink; a packed
// bucket's tail: -1, which writes nothing) and each row's page table (unused
// entries point at the sink).
func (c *kvCache) Plan(s accel.Stream, sg *accel.Stager, step *Step) (any, error) {
	rec := step.State[KVName].(*kvRecord)
	if err := c.copyForks(s, step); err != nil {
		return nil, err
	}
	bs := step.BatchSize()
	slots := make([]int32, step.Tokens)
	for i := range slots {
		slots[i] = -1
	}
	pages := make([]int32, bs*c.ppr)
	ps := c.cfg.PageSize
	t := 0
	for i, r := range step.Rows {
		st := c.reqs[r.ID]
		copy(pages[i*c.ppr:(i+1)*c.ppr], st.pages)
		for k := 0; k < rec.count[i]; k++ {
			pos := rec.start[i] + k
			if pg := pos / ps; pg < len(st.pages) {
				slots[t] = st.pages[pg]*int32(ps) + int32(pos%ps)
			} else {
				slots[t] = SinkPage*int32(ps) + int32(pos%ps)
			}
			t++
		}
	}
	ts, err := c.slots.get(KVName, s, step, []shape{{accel.I32, 1, step.Tokens}, {accel.I32, bs, c.ppr}})
	if err != nil {
		return nil, err
	}
	if err := stage(s, sg, ts[0], accel.I32Bytes(slots)); err != nil {
		return nil, err
	}
	if err := stage(s, sg, ts[1], accel.I32Bytes(pages)); err != nil {
		return nil, err
	}
	return &KVPlan{Slots: ts[0], Pages: ts[1], PageSize: ps, K: c.K, V: c.V}, nil
}

func (c *kvCache) Commit(step *Step) error { return nil }

func (c *kvCache) SupportsPrePlan() bool    { return true }
func (c *kvCache) ForcesDoubleBuffer() bool { return true }
func (c *kvCache) CanCapture() bool         { return true }

func (c *kvCache) BuildGraphBuffers(specs []graph.SlotSpec) error {
	return c.slots.build(KVName, specs, func(sp graph.SlotSpec) []shape {
		return []shape{{accel.I32, 1, sp.Bucket.Tokens}, {accel.I32, sp.Bucket.BatchSize, c.ppr}}
	})
}
