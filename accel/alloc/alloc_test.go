package alloc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// fakeMem and fakeSource are device memory that is only accounting.
type fakeMem struct{ n int64 }

func (m *fakeMem) Size() int64 { return m.n }

type fakeSource struct {
	capacity, used int64
	live           map[*fakeMem]bool
}

func newSource(capacity int64) *fakeSource {
	return &fakeSource{capacity: capacity, live: map[*fakeMem]bool{}}
}

func (s *fakeSource) AllocSegment(n int64) (accel.Memory, error) {
	if s.used+n > s.capacity {
		return nil, fmt.Errorf("fake: %d bytes, %d free: %w", n, s.capacity-s.used, accel.ErrOutOfMemory)
	}
	s.used += n
	m := &fakeMem{n}
	s.live[m] = true
	return m, nil
}

func (s *fakeSource) FreeSegment(m accel.Memory) {
	if !s.live[m.(*fakeMem)] {
		panic("segment freed twice")
	}
	delete(s.live, m.(*fakeMem))
	s.used -= m.Size()
}

func (s *fakeSource) MemInfo() accel.MemInfo {
	return accel.MemInfo{Free: s.capacity - s.used, Total: s.capacity}
}

// invariants checks what the package promises after every operation.
func invariants(t *testing.T, a *Caching, src *fakeSource, live []accel.Buffer) {
	t.Helper()
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
	st := a.Stats()
	if mi := src.MemInfo(); mi.Free+st.Reserved != mi.Total {
		t.Fatalf("free %d + reserved %d != capacity %d", mi.Free, st.Reserved, mi.Total)
	}
	byMem := map[accel.Memory][]accel.Buffer{}
	for _, b := range live {
		byMem[b.Memory()] = append(byMem[b.Memory()], b)
	}
	for _, bs := range byMem {
		sort.Slice(bs, func(i, j int) bool { return bs[i].Offset() < bs[j].Offset() })
		for i := 1; i < len(bs); i++ {
			if bs[i-1].Offset()+RoundUp(bs[i-1].Len()) > bs[i].Offset() {
				t.Fatalf("live blocks overlap: %v and %v", bs[i-1], bs[i])
			}
		}
	}
}

func TestRandomAllocFree(t *testing.T) {
	for seed := uint64(0); seed < 8; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 99))
			src := newSource(64 << 20)
			a := New(src)
			pool := a.NewPool()
			var live []accel.Buffer
			capturing := int64(-1)
			for step := 0; step < 2000; step++ {
				switch op := r.IntN(10); {
				case op < 5:
					var n int64
					switch r.IntN(3) {
					case 0:
						n = int64(r.IntN(4096))
					case 1:
						n = int64(r.IntN(SmallLimit))
					default:
						n = int64(SmallLimit + r.IntN(6<<20))
					}
					stream := int64(r.IntN(3))
					b, err := a.Alloc(stream, n)
					if err != nil {
						if !errors.Is(err, accel.ErrOutOfMemory) {
							t.Fatalf("alloc %d: %v", n, err)
						}
						break
					}
					if b.Len() != n {
						t.Fatalf("asked %d bytes, got a %d-byte view", n, b.Len())
					}
					live = append(live, b)
				case op < 9 && len(live) > 0:
					i := r.IntN(len(live))
					if err := a.Free(live[i]); err != nil {
						t.Fatal(err)
					}
					live = append(live[:i], live[i+1:]...)
				case capturing < 0:
					capturing = int64(r.IntN(3))
					if err := a.BeginCapture(capturing, pool); err != nil {
						t.Fatal(err)
					}
				default:
					if r.IntN(2) == 0 {
						if _, err := a.EndCapture(capturing); err != nil {
							t.Fatal(err)
						}
					} else {
						a.AbortCapture(capturing)
						// Abort freed the capture's live blocks: forget them.
						live = liveOnly(a, live)
					}
					capturing = -1
				}
				invariants(t, a, src, live)
			}
			if capturing >= 0 {
				a.AbortCapture(capturing)
				live = liveOnly(a, live)
			}
			for _, b := range live {
				if err := a.Free(b); err != nil {
					t.Fatal(err)
				}
			}
			pool.Release()
			a.EmptyCache()
			invariants(t, a, src, nil)
			if st := a.Stats(); st.Reserved != 0 || st.Allocated != 0 {
				t.Fatalf("after freeing everything: %+v", st)
			}
		})
	}
}

func liveOnly(a *Caching, bs []accel.Buffer) []accel.Buffer {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []accel.Buffer
	for _, b := range bs {
		if _, ok := a.blocks[key{b.Memory(), b.Offset()}]; ok {
			out = append(out, b)
		}
	}
	return out
}

func TestSmallAndLargeSegments(t *testing.T) {
	src := newSource(64 << 20)
	a := New(src)
	b1, _ := a.Alloc(0, 100)
	b2, _ := a.Alloc(0, 1000)
	if b1.Memory() != b2.Memory() {
		t.Error("two small requests should share a 2 MiB segment")
	}
	if got := a.Stats().Reserved; got != SegmentSize {
		t.Errorf("reserved %d, want one segment", got)
	}
	b3, _ := a.Alloc(0, 3<<20)
	if b3.Memory().Size() != 4<<20 {
		t.Errorf("a 3 MiB request got a %d-byte segment, want 4 MiB", b3.Memory().Size())
	}
	// Freed blocks are cached and reused.
	a.Free(b2)
	b4, _ := a.Alloc(0, 900)
	if b4.Memory() != b2.Memory() || b4.Offset() != b2.Offset() {
		t.Error("a freed block was not reused")
	}
	if err := a.Free(accel.NewBuffer(b1.Memory(), 7, 1)); !errors.Is(err, ErrNotAllocated) {
		t.Errorf("free of a buffer never allocated: %v", err)
	}
	a.Free(b1)
	if err := a.Free(b1); !errors.Is(err, ErrNotAllocated) {
		t.Errorf("double free: %v", err)
	}
}

func TestPoolReuseAcrossCaptures(t *testing.T) {
	src := newSource(64 << 20)
	a := New(src)
	p := a.NewPool()
	const stream = 5
	if err := a.BeginCapture(stream, p); err != nil {
		t.Fatal(err)
	}
	scratch, _ := a.Alloc(stream, 512<<10)
	kept, _ := a.Alloc(stream, 256<<10)
	a.Free(scratch)
	r1, err := a.EndCapture(stream)
	if err != nil {
		t.Fatal(err)
	}
	a.GraphCreated(p)
	if r1.Memory.Kept != RoundUp(256<<10) || r1.Memory.PoolGrowth != SegmentSize {
		t.Errorf("first capture: %+v", r1.Memory)
	}
	// Allocations outside capture do not touch the pool.
	d, _ := a.Alloc(stream, 512<<10)
	if d.Memory() == scratch.Memory() {
		t.Error("a default-pool allocation came from the graph pool")
	}
	// The second capture reuses the first's freed scratch and grows nothing.
	a.BeginCapture(stream, p)
	s2, _ := a.Alloc(stream, 512<<10)
	r2, _ := a.EndCapture(stream)
	a.GraphCreated(p)
	if s2.Memory() != scratch.Memory() || s2.Offset() != scratch.Offset() {
		t.Error("the second capture did not reuse the first's scratch")
	}
	if r2.Memory.PoolGrowth != 0 {
		t.Errorf("second capture grew the pool by %d", r2.Memory.PoolGrowth)
	}
	// The pool keeps its memory while a graph lives, even released.
	a.Free(kept)
	a.Free(s2)
	p.Release()
	if a.Stats().PoolReserved != SegmentSize {
		t.Error("a released pool with live graphs gave its memory back")
	}
	a.GraphDestroyed(p)
	a.GraphDestroyed(p)
	if st := a.Stats(); st.PoolReserved != 0 || st.Pools != 0 {
		t.Errorf("after the last graph died: %+v", st)
	}
	if err := a.BeginCapture(stream, p); err == nil {
		t.Error("capture into a released pool was accepted")
	}
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestAbortCaptureReturnsBlocks(t *testing.T) {
	src := newSource(64 << 20)
	a := New(src)
	p := a.NewPool()
	a.BeginCapture(1, p)
	a.Alloc(1, 1000)
	a.Alloc(1, 3<<20)
	a.AbortCapture(1)
	if st := p.Stats(); st.Allocated != 0 {
		t.Errorf("aborted capture left %d bytes allocated", st.Allocated)
	}
	if a.Capturing(1) != nil {
		t.Error("stream still routed to the pool")
	}
	if err := a.BeginCapture(1, p); err != nil {
		t.Errorf("pool refused the next capture: %v", err)
	}
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestOutOfMemory(t *testing.T) {
	src := newSource(8 << 20)
	a := New(src)
	var bs []accel.Buffer
	for {
		b, err := a.Alloc(0, 1<<20)
		if err != nil {
			if !errors.Is(err, accel.ErrOutOfMemory) {
				t.Fatal(err)
			}
			break
		}
		bs = append(bs, b)
	}
	before := a.Stats()
	if _, err := a.Alloc(0, 4<<20); !errors.Is(err, accel.ErrOutOfMemory) {
		t.Fatal("want out of memory")
	}
	after := a.Stats()
	if after.Reserved != before.Reserved || after.Allocated != before.Allocated || after.NumOOM != before.NumOOM+1 {
		t.Errorf("a failed allocation changed the state: %+v -> %+v", before, after)
	}
	// Cached empty segments are given back to serve a large request.
	for _, b := range bs {
		a.Free(b)
	}
	if a.Stats().Reserved == 0 {
		t.Fatal("frees should be cached")
	}
	if _, err := a.Alloc(0, 7<<20); err != nil {
		t.Fatalf("the cache was not released on demand: %v", err)
	}
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
}
