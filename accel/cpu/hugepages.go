package cpu

import (
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"
)

// Packed weights on transparent huge pages.
//
// A batch-1 decode step streams every packed weight matrix from memory once
// (a 110M Q4_0 model: about 68 MB a step; a 1B Q4_K_M one 630 MB), which
// with 4 KiB pages is one TLB miss per 4 KiB read. On Linux, where
// transparent huge pages are not "never", the packs of at least hugeMin
// bytes are therefore cut from 2 MiB-aligned anonymous mappings given
// madvise(MADV_HUGEPAGE) before their first touch, so that the kernel backs
// them with 2 MiB pages. The packed bytes are the same either way.
//
// Invariants:
//   - A mapping is Go's to forget but not Go's memory: the GC neither scans
//     nor frees it, so it must not be unmapped while anything can still read
//     it. Each mapping has one owner object (hugeChunk), and every packed
//     whose bytes lie in the mapping references that owner (packed.owner);
//     the mapping is unmapped by a cleanup (runtime.AddCleanup) on the
//     owner, so only once no packed that points into it is reachable. The
//     table's bookkeeping (removeLocked, dropAll) never unmaps anything: a
//     kernel in flight that still holds a pack the table has dropped keeps
//     its mapping alive, and the kernels' callers keep the *packed alive
//     (runtime.KeepAlive) until the kernel has returned, since the raw
//     pointers a kernel derives from it do not.
//   - The allocator holds its current chunk through a weak pointer: a
//     chunk whose packs are all gone is unmapped even while it is the one
//     being cut from, and the next pack maps a fresh one.
//   - Allocations are bumped, 64-byte aligned, from the current chunk and
//     never reused before the chunk is unmapped, so their bytes are the
//     mapping's zeros, as alignedBytes' are. A dead pack's bytes inside a
//     chunk that still holds a live pack stay mapped until that pack dies
//     too: the waste is bounded by one chunk per long-lived pack cut from
//     it, and in practice (a model's packs are made together and die
//     together) it is the chunk's tail.
//   - The memory budget is charged what each pack takes (its panels'
//     bytes), as for heap packs; neither the 64-byte rounding nor a chunk's
//     unused tail is charged: a tail that was never touched is address
//     space, not memory (at most the one 2 MiB page the last pack ends in
//     is resident beyond what is charged).
//   - Anything that fails (no mapping, madvise refused, another OS, THP
//     "never" or absent, REPRISE_CPU_HUGEPAGES=0) falls back to Go heap
//     memory without an error.

// EnvHugePages, set to 0, keeps packed weights in Go heap memory (4 KiB
// pages) instead of on transparent huge pages.
const EnvHugePages = "REPRISE_CPU_HUGEPAGES"

const (
	hugePage   = 2 << 20  // the huge page size (x86-64, and arm64 with 4 KiB pages)
	chunkBytes = 64 << 20 // a chunk's size
	ownMapMin  = 16 << 20 // allocations from this size get a mapping of their own
	hugeMin    = 64 << 10 // smaller allocations stay on the Go heap
)

// hugeChunk owns one mapping: it is reachable from every packed whose bytes
// lie in the mapping, and unmapped by a cleanup once it is not.
type hugeChunk struct {
	b []byte // the 2 MiB-aligned part that is handed out
}

// hugeStats counts an allocator's live mappings (tests, stats). It is its
// own object so that a chunk's cleanup, which decrements it, does not keep
// the allocator's device reachable.
type hugeStats struct {
	chunks atomic.Int64 // mappings not yet unmapped
	bytes  atomic.Int64 // their bytes
}

// hugeAlloc cuts packs from huge-page chunks. The zero value is ready; a
// nil *hugeAlloc allocates on the Go heap.
type hugeAlloc struct {
	mu    sync.Mutex
	cur   weak.Pointer[hugeChunk]
	used  uintptr // bytes of cur handed out
	stats *hugeStats
	// off forces the heap, and mapper (nil: mapHuge) replaces the mapping
	// (tests of the fallback); the process-wide setting is hugePagesOn.
	off    bool
	mapper func(n uintptr) (raw, b []byte, err error)
}

// bytes returns n zeroed bytes at a 64-byte boundary and the owner that
// keeps them mapped (nil: Go heap memory, kept by the slice itself).
func (a *hugeAlloc) bytes(n int) ([]byte, *hugeChunk) {
	if a == nil || a.off || n < hugeMin || !hugePagesOn() {
		return alignedBytes(n), nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stats == nil {
		a.stats = &hugeStats{}
	}
	sz := (uintptr(n) + 63) &^ 63
	if sz >= ownMapMin {
		c := a.mapChunk((sz + hugePage - 1) &^ (hugePage - 1))
		if c == nil {
			return alignedBytes(n), nil
		}
		return c.b[:n:n], c
	}
	c := a.cur.Value()
	if c == nil || uintptr(len(c.b))-a.used < sz {
		if c = a.mapChunk(chunkBytes); c == nil {
			return alignedBytes(n), nil
		}
		a.cur, a.used = weak.Make(c), 0
	}
	b := c.b[a.used : a.used+uintptr(n) : a.used+uintptr(n)]
	a.used += sz
	return b, c
}

// mapChunk maps n bytes (a multiple of hugePage) on huge pages, or nil.
func (a *hugeAlloc) mapChunk(n uintptr) *hugeChunk {
	m := a.mapper
	if m == nil {
		m = mapHuge
	}
	raw, b, err := m(n)
	if err != nil {
		hugeFailed.Do(func() {
			slog.Debug("cpu: no huge-page mapping for packed weights; they stay on the Go heap", "err", err)
		})
		return nil
	}
	c := &hugeChunk{b: b}
	st := a.stats
	st.chunks.Add(1)
	st.bytes.Add(int64(len(raw)))
	addUnmapCleanup(c, raw, st)
	return c
}

var hugeFailed sync.Once

// hugeMode is why packed weights are or are not on huge pages, read once.
var hugeMode = sync.OnceValues(func() (bool, string) { return hugeDecision(os.Getenv(EnvHugePages), thpMode) })

// hugeDecision is hugeMode from the environment variable's value and the
// kernel's setting.
func hugeDecision(env string, thp func() (bool, string)) (bool, string) {
	if env == "0" {
		return false, EnvHugePages + "=0"
	}
	return thp()
}

func hugePagesOn() bool { on, _ := hugeMode(); return on }

// logHugePages says once, at the first device's opening, whether packed
// weights are on huge pages (debug level: REPRISE_LOG=debug).
var logHugePages = sync.OnceFunc(func() {
	on, why := hugeMode()
	slog.Debug("cpu: packed weights on transparent huge pages", "on", on, "why", why)
})

// thpSetting is the bracketed choice of a /sys/kernel/mm/transparent_hugepage
// file ("always [madvise] never" is "madvise"), or "".
func thpSetting(s string) string {
	i := 0
	for i < len(s) && s[i] != '[' {
		i++
	}
	for j := i + 1; j < len(s); j++ {
		if s[j] == ']' {
			return s[i+1 : j]
		}
	}
	return ""
}

// alignedBytes is n zeroed bytes on the Go heap starting at a 64-byte
// boundary.
func alignedBytes(n int) []byte {
	b := make([]byte, n+64)
	off := (64 - int(uintptr(unsafe.Pointer(&b[0]))&63)) & 63
	return b[off : off+n : off+n]
}
