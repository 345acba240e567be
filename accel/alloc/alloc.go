package alloc

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/internal/failpoint"
)

// Sizes the allocator works in.
const (
	// Granularity every request is rounded up to.
	Granularity = 512
	// SmallLimit is the largest request served from shared small segments.
	SmallLimit = 1 << 20
	// SegmentSize is the size of a small segment and the unit large segments
	// are rounded to.
	SegmentSize = 2 << 20
)

// Source is the device memory under the allocator. AllocSegment fails with an
// error wrapping accel.ErrOutOfMemory when the device has no room.
type Source interface {
	AllocSegment(n int64) (accel.Memory, error)
	FreeSegment(m accel.Memory)
	// MemInfo is the device's free and total memory.
	MemInfo() accel.MemInfo
}

type segment struct {
	mem    accel.Memory
	size   int64
	pool   *Pool
	stream int64
	small  bool
	id     int64  // creation order, for a deterministic best fit
	head   *block // lowest-addressed block
	live   int    // allocated blocks
}

type block struct {
	seg        *segment
	off, size  int64
	free       bool
	prev, next *block
	capture    *capture // the capture that allocated it, while it runs
}

type capture struct {
	pool    *Pool
	stream  int64
	live    map[*block]struct{} // allocated during the capture, not yet freed
	growth  int64               // segments the pool gained
	outside int64               // device memory taken outside the pool
}

// Pool is a region of the allocator: the default pool, or a graph pool.
type Pool struct {
	a        *Caching
	id       int
	free     []*block // free blocks, sorted by (size, address order)
	segs     map[*segment]struct{}
	reserved int64
	alloc    int64
	graphs   int
	released bool // the owner dropped it (never for the default pool)
}

// Caching is the caching allocator. It is safe for concurrent use.
type Caching struct {
	mu     sync.Mutex
	src    Source
	def    *Pool
	pools  map[int]*Pool
	nextID int
	blocks map[key]*block // live blocks by their buffer's start
	capt   map[int64]*capture
	seq    int64
	stats  accel.AllocStats
}

type key struct {
	mem accel.Memory
	off int64
}

// New makes an allocator over src.
func New(src Source) *Caching {
	a := &Caching{src: src, pools: map[int]*Pool{}, blocks: map[key]*block{}, capt: map[int64]*capture{}}
	a.def = &Pool{a: a, id: 0, segs: map[*segment]struct{}{}}
	a.nextID = 1
	return a
}

// RoundUp is the size a request of n bytes takes.
func RoundUp(n int64) int64 {
	if n <= 0 {
		return Granularity
	}
	return (n + Granularity - 1) / Granularity * Granularity
}

// SegmentFor is the segment size a request of n bytes would get.
func SegmentFor(n int64) int64 {
	n = RoundUp(n)
	if n <= SmallLimit {
		return SegmentSize
	}
	return (n + SegmentSize - 1) / SegmentSize * SegmentSize
}

// NewPool makes a graph pool.
func (a *Caching) NewPool() *Pool {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := &Pool{a: a, id: a.nextID, segs: map[*segment]struct{}{}}
	a.nextID++
	a.pools[p.id] = p
	return p
}

// ID is the pool's number; 0 is the default pool.
func (p *Pool) ID() int { return p.id }

// Stats is the pool's accounting.
func (p *Pool) Stats() accel.PoolStats {
	p.a.mu.Lock()
	defer p.a.mu.Unlock()
	return accel.PoolStats{Reserved: p.reserved, Allocated: p.alloc, Graphs: p.graphs}
}

// Release drops the owner's reference; see the package comment.
func (p *Pool) Release() {
	p.a.mu.Lock()
	defer p.a.mu.Unlock()
	if p.id == 0 || p.released {
		return
	}
	p.released = true
	p.a.reclaim(p)
}

func (p *Pool) dead() bool { return p.id != 0 && p.released && p.graphs == 0 }

// GraphCreated counts a graph captured into p; the pool's memory stays
// reserved until GraphDestroyed has been called as often.
func (a *Caching) GraphCreated(p *Pool) {
	a.mu.Lock()
	p.graphs++
	a.mu.Unlock()
}

// GraphDestroyed undoes GraphCreated.
func (a *Caching) GraphDestroyed(p *Pool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.graphs > 0 {
		p.graphs--
	}
	a.reclaim(p)
}

// reclaim returns a dead pool's empty segments to the device.
func (a *Caching) reclaim(p *Pool) {
	if !p.dead() {
		return
	}
	for s := range p.segs {
		if s.live == 0 {
			a.releaseSegment(s)
		}
	}
	if len(p.segs) == 0 {
		delete(a.pools, p.id)
	}
}

// BeginCapture routes stream's allocations to p until EndCapture or
// AbortCapture.
func (a *Caching) BeginCapture(stream int64, p *Pool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, busy := a.capt[stream]; busy {
		return fmt.Errorf("alloc: stream %d already captures into a pool: %w", stream, accel.ErrAlreadyCapturing)
	}
	if p == nil || p.id == 0 {
		return fmt.Errorf("alloc: capture needs a graph pool, not the default pool: %w", accel.ErrInvalidArgument)
	}
	if p.released {
		return fmt.Errorf("alloc: capture into released pool %d: %w", p.id, accel.ErrInvalidArgument)
	}
	a.capt[stream] = &capture{pool: p, stream: stream, live: map[*block]struct{}{}}
	return nil
}

// CaptureResult is what a finished capture did to its pool.
type CaptureResult struct {
	Pool   *Pool
	Memory accel.GraphMemory
}

// EndCapture stops routing and reports what the capture holds. The caller
// creates the graph (GraphCreated) if it keeps one.
func (a *Caching) EndCapture(stream int64) (CaptureResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.capt[stream]
	if !ok {
		return CaptureResult{}, accel.ErrNotCapturing
	}
	delete(a.capt, stream)
	var kept int64
	for b := range c.live {
		kept += b.size
		b.capture = nil
	}
	return CaptureResult{Pool: c.pool, Memory: accel.GraphMemory{Kept: kept, PoolGrowth: c.growth, Outside: c.outside}}, nil
}

// AbortCapture stops routing and frees every block the capture allocated and
// did not free, so a failed capture leaves its pool as it found it (but for
// segments it grew, which stay cached in the pool).
func (a *Caching) AbortCapture(stream int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.capt[stream]
	if !ok {
		return
	}
	delete(a.capt, stream)
	for b := range c.live {
		b.capture = nil
		a.freeBlock(b)
	}
	a.reclaim(c.pool)
}

// ChargeOutside records device memory a capture on stream took outside its
// pool (executable memory, say), for GraphMemory.Outside.
func (a *Caching) ChargeOutside(stream int64, n int64) {
	a.mu.Lock()
	if c, ok := a.capt[stream]; ok {
		c.outside += n
	}
	a.mu.Unlock()
}

// Alloc allocates n bytes for stream (0: not tied to a stream), from the
// capture's pool while the stream captures, else from the default pool.
func (a *Caching) Alloc(stream int64, n int64) (accel.Buffer, error) {
	if n < 0 {
		return accel.Buffer{}, fmt.Errorf("alloc: negative size %d: %w", n, accel.ErrInvalidArgument)
	}
	if err := failpoint.Inject(failpoint.Alloc); err != nil {
		return accel.Buffer{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.def
	c := a.capt[stream]
	if c != nil {
		p = c.pool
	}
	size := RoundUp(n)
	b := p.takeFree(stream, size)
	if b == nil {
		seg, err := a.newSegment(p, stream, size)
		if err != nil {
			a.stats.NumOOM++
			return accel.Buffer{}, err
		}
		if c != nil {
			c.growth += seg.size
		}
		b = seg.head
		p.removeFree(b)
	}
	a.split(b, size)
	b.free = false
	b.seg.live++
	p.alloc += b.size
	a.stats.Allocated += b.size
	if a.stats.Allocated > a.stats.PeakAllocated {
		a.stats.PeakAllocated = a.stats.Allocated
	}
	a.stats.NumAllocs++
	if c != nil {
		b.capture = c
		c.live[b] = struct{}{}
	}
	a.blocks[key{b.seg.mem, b.off}] = b
	// The view is the size asked for; the block may be larger.
	return accel.NewBuffer(b.seg.mem, b.off, n), nil
}

// BlockSize is the bytes the allocator holds for a live buffer from Alloc:
// its request rounded up, or more where the remainder of the block it took
// was too small to split off. False for a buffer it did not hand out.
func (a *Caching) BlockSize(b accel.Buffer) (int64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	blk, ok := a.blocks[key{b.Memory(), b.Offset()}]
	if !ok {
		return 0, false
	}
	return blk.size, true
}

// ErrNotAllocated is returned for a Free of a buffer this allocator did not
// hand out (or already took back).
var ErrNotAllocated = errors.New("alloc: buffer is not a live allocation")

// Free returns a buffer from Alloc to its pool.
func (a *Caching) Free(b accel.Buffer) error {
	if b.IsNil() {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	blk, ok := a.blocks[key{b.Memory(), b.Offset()}]
	if !ok {
		return fmt.Errorf("%w: %v", ErrNotAllocated, b)
	}
	if blk.capture != nil {
		delete(blk.capture.live, blk)
		blk.capture = nil
	}
	a.freeBlock(blk)
	return nil
}

func (a *Caching) freeBlock(b *block) {
	delete(a.blocks, key{b.seg.mem, b.off})
	p := b.seg.pool
	p.alloc -= b.size
	a.stats.Allocated -= b.size
	a.stats.NumFrees++
	b.free = true
	b.seg.live--
	// Merge with free neighbours so the segment never holds two adjacent
	// free blocks.
	if n := b.next; n != nil && n.free {
		p.removeFree(n)
		b.size += n.size
		b.next = n.next
		if n.next != nil {
			n.next.prev = b
		}
	}
	if pr := b.prev; pr != nil && pr.free {
		p.removeFree(pr)
		pr.size += b.size
		pr.next = b.next
		if b.next != nil {
			b.next.prev = pr
		}
		b = pr
	}
	p.insertFree(b)
	if b.seg.live == 0 && p.dead() {
		a.releaseSegment(b.seg)
		if len(p.segs) == 0 {
			delete(a.pools, p.id)
		}
	}
}

// splits reports whether a block with rest bytes left over is split: small
// segments split down to the granularity; a large block keeps a small
// remainder rather than fragment large segments into slivers. Packer
// predicts placements by the same rule.
func splits(small bool, rest int64) bool {
	return (small && rest >= Granularity) || (!small && rest > SmallLimit)
}

func (a *Caching) split(b *block, size int64) {
	rest := b.size - size
	if splits(b.seg.small, rest) {
		r := &block{seg: b.seg, off: b.off + size, size: rest, free: true, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = r
		}
		b.next = r
		b.size = size
		b.seg.pool.insertFree(r)
	}
}

func (a *Caching) newSegment(p *Pool, stream int64, size int64) (*segment, error) {
	n := SegmentFor(size)
	mem, err := a.src.AllocSegment(n)
	if err != nil && errors.Is(err, accel.ErrOutOfMemory) {
		// Give the device back what the default pool caches, then retry once.
		a.releaseCached()
		mem, err = a.src.AllocSegment(n)
	}
	if err != nil {
		mi := a.src.MemInfo()
		return nil, fmt.Errorf("alloc: %d bytes (a %d-byte segment) in pool %d: device free %d of %d, reserved %d, allocated %d: %w",
			size, n, p.id, mi.Free, mi.Total, a.stats.Reserved, a.stats.Allocated, err)
	}
	a.seq++
	seg := &segment{mem: mem, size: n, pool: p, stream: stream, small: size <= SmallLimit, id: a.seq}
	seg.head = &block{seg: seg, off: 0, size: n, free: true}
	p.segs[seg] = struct{}{}
	p.reserved += n
	a.stats.Reserved += n
	a.stats.Segments++
	if a.stats.Reserved > a.stats.PeakReserved {
		a.stats.PeakReserved = a.stats.Reserved
	}
	p.insertFree(seg.head)
	return seg, nil
}

func (a *Caching) releaseSegment(s *segment) {
	p := s.pool
	p.removeFree(s.head)
	delete(p.segs, s)
	p.reserved -= s.size
	a.stats.Reserved -= s.size
	a.stats.Segments--
	a.stats.SegmentsFreed++
	a.src.FreeSegment(s.mem)
}

// releaseCached returns every empty segment of the default pool.
func (a *Caching) releaseCached() {
	for s := range a.def.segs {
		if s.live == 0 {
			a.releaseSegment(s)
		}
	}
}

// EmptyCache returns the default pool's empty segments to the device.
func (a *Caching) EmptyCache() {
	a.mu.Lock()
	a.releaseCached()
	a.mu.Unlock()
}

// ResetPeak restarts the peaks from the current figures.
func (a *Caching) ResetPeak() {
	a.mu.Lock()
	a.stats.PeakAllocated, a.stats.PeakReserved = a.stats.Allocated, a.stats.Reserved
	a.mu.Unlock()
}

// Stats is a consistent snapshot.
func (a *Caching) Stats() accel.AllocStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.DeviceCapacity = a.src.MemInfo().Total
	for _, p := range a.pools {
		s.Pools++
		s.PoolReserved += p.reserved
		s.PoolAllocated += p.alloc
	}
	return s
}

// Capturing reports the pool stream captures into, or nil.
func (a *Caching) Capturing(stream int64) *Pool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.capt[stream]; c != nil {
		return c.pool
	}
	return nil
}

// free-list helpers: p.free is sorted by (size, segment order, offset) so the
// first fit is the best fit and the choice is deterministic.

func less(x, y *block) bool {
	if x.size != y.size {
		return x.size < y.size
	}
	if x.seg != y.seg {
		return segOrder(x.seg) < segOrder(y.seg)
	}
	return x.off < y.off
}

// segOrder orders segments by creation; any total order works, it only has
// to be stable.
func segOrder(s *segment) int64 { return s.id }

func (p *Pool) insertFree(b *block) {
	i := sort.Search(len(p.free), func(i int) bool { return !less(p.free[i], b) })
	p.free = append(p.free, nil)
	copy(p.free[i+1:], p.free[i:])
	p.free[i] = b
}

func (p *Pool) removeFree(b *block) {
	i := sort.Search(len(p.free), func(i int) bool { return !less(p.free[i], b) })
	for ; i < len(p.free); i++ {
		if p.free[i] == b {
			p.free = append(p.free[:i], p.free[i+1:]...)
			return
		}
	}
}

// takeFree removes and returns the smallest free block of at least size on
// stream's segments of the right class, or nil.
func (p *Pool) takeFree(stream int64, size int64) *block {
	small := size <= SmallLimit
	i := sort.Search(len(p.free), func(i int) bool { return p.free[i].size >= size })
	for ; i < len(p.free); i++ {
		b := p.free[i]
		if b.seg.stream == stream && b.seg.small == small {
			p.free = append(p.free[:i], p.free[i+1:]...)
			return b
		}
	}
	return nil
}

// Check verifies the allocator's invariants; tests call it after every step.
func (a *Caching) Check() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var reserved, allocated int64
	live := 0
	check := func(p *Pool) error {
		var pr, pa int64
		freeSet := map[*block]bool{}
		for _, b := range p.free {
			freeSet[b] = true
		}
		nfree := 0
		for s := range p.segs {
			pr += s.size
			var off int64
			lv := 0
			for b := s.head; b != nil; b = b.next {
				if b.off != off {
					return fmt.Errorf("pool %d: block at %d, want %d: blocks do not tile the segment", p.id, b.off, off)
				}
				if b.next != nil && b.next.prev != b {
					return fmt.Errorf("pool %d: broken block links", p.id)
				}
				if b.free {
					nfree++
					if !freeSet[b] {
						return fmt.Errorf("pool %d: free block at %d missing from the free list", p.id, b.off)
					}
					if b.next != nil && b.next.free {
						return fmt.Errorf("pool %d: two adjacent free blocks at %d", p.id, b.off)
					}
				} else {
					lv++
					pa += b.size
					if a.blocks[key{s.mem, b.off}] != b {
						return fmt.Errorf("pool %d: live block at %d not indexed", p.id, b.off)
					}
				}
				off += b.size
			}
			if off != s.size {
				return fmt.Errorf("pool %d: blocks cover %d of a %d-byte segment", p.id, off, s.size)
			}
			if lv != s.live {
				return fmt.Errorf("pool %d: segment counts %d live blocks, has %d", p.id, s.live, lv)
			}
			live += lv
		}
		if nfree != len(p.free) {
			return fmt.Errorf("pool %d: free list has %d blocks, segments %d", p.id, len(p.free), nfree)
		}
		if pr != p.reserved || pa != p.alloc {
			return fmt.Errorf("pool %d: accounts reserved %d allocated %d, has %d and %d", p.id, p.reserved, p.alloc, pr, pa)
		}
		reserved += pr
		allocated += pa
		return nil
	}
	if err := check(a.def); err != nil {
		return err
	}
	for _, p := range a.pools {
		if err := check(p); err != nil {
			return err
		}
	}
	if live != len(a.blocks) {
		return fmt.Errorf("%d live blocks indexed, %d in segments", len(a.blocks), live)
	}
	if reserved != a.stats.Reserved || allocated != a.stats.Allocated {
		return fmt.Errorf("totals: reserved %d allocated %d, accounted %d and %d", reserved, allocated, a.stats.Reserved, a.stats.Allocated)
	}
	return nil
}
