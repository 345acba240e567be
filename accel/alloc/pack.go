package alloc

import "slices"

// Packer predicts where the allocator puts a series of allocations on one
// stream of one pool that are never freed (a graph runner's static outputs,
// say), starting from no segments: the same classes, best fit, splitting and
// segment sizes as Caching.Alloc. So small requests share segments down to
// the granularity and each holds only its rounded size, while a large one
// holds a whole segment unless the remainder is worth splitting off, and a
// later large request may land in such a remainder.
type Packer struct {
	free     []packBlock // sorted as the allocator's free list: size, segment, offset
	segs     int64
	held     int64
	reserved int64
}

type packBlock struct {
	seg, off, size int64
	small          bool
}

func (x packBlock) less(y packBlock) bool {
	if x.size != y.size {
		return x.size < y.size
	}
	if x.seg != y.seg {
		return x.seg < y.seg
	}
	return x.off < y.off
}

// Alloc places a request of n bytes and returns the bytes its block holds.
func (p *Packer) Alloc(n int64) int64 {
	size := RoundUp(n)
	small := size <= SmallLimit
	b, found := packBlock{}, false
	for i, f := range p.free {
		if f.size >= size && f.small == small {
			b, found = f, true
			p.free = slices.Delete(p.free, i, i+1)
			break
		}
	}
	if !found {
		p.segs++
		b = packBlock{seg: p.segs, size: SegmentFor(size), small: small}
		p.reserved += b.size
	}
	if rest := b.size - size; splits(small, rest) {
		p.insert(packBlock{seg: b.seg, off: b.off + size, size: rest, small: small})
		b.size = size
	}
	p.held += b.size
	return b.size
}

func (p *Packer) insert(b packBlock) {
	i, _ := slices.BinarySearchFunc(p.free, b, func(x, y packBlock) int {
		if x.less(y) {
			return -1
		}
		if y.less(x) {
			return 1
		}
		return 0
	})
	p.free = slices.Insert(p.free, i, b)
}

// Held is the bytes the placed blocks hold: what they take from everyone
// else, since the rest of their segments serves other allocations.
func (p *Packer) Held() int64 { return p.held }

// Reserved is the bytes of the segments the placed blocks needed, had the
// stream no segments before.
func (p *Packer) Reserved() int64 { return p.reserved }
