package cpu

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
)

// waitUnmapped collects garbage until a's chunks are down to want (the
// cleanups run on their own goroutine after a GC), failing after a while.
func waitUnmapped(t *testing.T, a *hugeAlloc, want int64) {
	t.Helper()
	for range 200 {
		if a.stats == nil || a.stats.chunks.Load() == want {
			return
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d chunks still mapped (%d bytes), want %d", a.stats.chunks.Load(), a.stats.bytes.Load(), want)
}

// TestHugeAllocLayout: every allocation is its length, 64-byte aligned,
// zeroed, and no two live ones overlap; the small ones share chunks and
// the large ones get their own.
func TestHugeAllocLayout(t *testing.T) {
	a := &hugeAlloc{}
	sizes := []int{1, 100, hugeMin - 1, hugeMin, hugeMin + 1, 100_000, 1 << 20, 3<<20 + 7, ownMapMin, ownMapMin + 1}
	for range 8 {
		sizes = append(sizes, 9<<20+13) // more than a chunk in all
	}
	type got struct {
		b     []byte
		owner *hugeChunk
	}
	var live []got
	for i, n := range sizes {
		b, owner := a.bytes(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("bytes(%d): len %d cap %d", n, len(b), cap(b))
		}
		if p := uintptr(unsafe.Pointer(&b[0])); p%64 != 0 {
			t.Fatalf("bytes(%d) at %#x, not 64-byte aligned", n, p)
		}
		// The ends only: touching every byte would fault in every page.
		if slices.ContainsFunc(b[:min(n, 64)], nonZero) || slices.ContainsFunc(b[n-min(n, 64):], nonZero) {
			t.Fatalf("bytes(%d) not zeroed", n)
		}
		if on := hugePagesOn() && n >= hugeMin; (owner != nil) != on {
			t.Fatalf("bytes(%d): owner %v, huge pages on %v", n, owner != nil, on)
		}
		if owner != nil {
			if n >= ownMapMin && uintptr(unsafe.Pointer(&b[0]))%hugePage != 0 {
				t.Fatalf("bytes(%d): a mapping of its own not at a huge page boundary", n)
			}
			if s := unsafe.Pointer(&owner.b[0]); uintptr(unsafe.Pointer(&b[0])) < uintptr(s) || uintptr(unsafe.Pointer(&b[n-1])) >= uintptr(s)+uintptr(len(owner.b)) {
				t.Fatalf("bytes(%d) outside its owner's mapping", n)
			}
		}
		b[0], b[n-1] = byte(i+1), byte(i+1)
		live = append(live, got{b, owner})
	}
	slices.SortFunc(live, func(x, y got) int {
		return int(uintptr(unsafe.Pointer(&x.b[0])) - uintptr(unsafe.Pointer(&y.b[0])))
	})
	for i := 1; i < len(live); i++ {
		if end := uintptr(unsafe.Pointer(&live[i-1].b[0])) + uintptr(len(live[i-1].b)); end > uintptr(unsafe.Pointer(&live[i].b[0])) {
			t.Fatalf("allocations of %d and %d bytes overlap", len(live[i-1].b), len(live[i].b))
		}
	}
	if !hugePagesOn() {
		return
	}
	owners := map[*hugeChunk]bool{}
	for _, g := range live {
		if g.owner != nil {
			owners[g.owner] = true
		}
	}
	// The small ones and six of the 9 MiB ones in the first 64 MiB chunk,
	// the other two in a second, and the two of their own.
	if n := len(owners); n != 4 || a.stats.chunks.Load() != 4 {
		t.Errorf("%d owners, %d chunks mapped; want 4", n, a.stats.chunks.Load())
	}
	runtime.KeepAlive(live)
}

// TestHugeAllocFreed: a chunk stays mapped while any allocation from it is
// reachable, the current one included, and is unmapped once none is.
func TestHugeAllocFreed(t *testing.T) {
	if !hugePagesOn() {
		t.Skip("huge pages are off here: ", hugeWhy())
	}
	a := &hugeAlloc{}
	// What keeps a chunk mapped is its owner (a packed's), not a slice of
	// its bytes, which the GC does not see.
	_, keep := a.bytes(1 << 20)
	for range 10 {
		a.bytes(9 << 20) // garbage at once: the first chunk's tail and the next ones
	}
	_, big := a.bytes(ownMapMin)
	waitUnmapped(t, a, 2) // keep's chunk and big's own
	runtime.KeepAlive(big)
	waitUnmapped(t, a, 1)
	runtime.KeepAlive(keep)
	waitUnmapped(t, a, 0)
	// The current chunk was unmapped under the allocator: the next
	// allocation maps a fresh one.
	_, o := a.bytes(hugeMin)
	if o == nil || a.stats.chunks.Load() != 1 {
		t.Fatalf("after the chunks died: owner %v, %d chunks", o, a.stats.chunks.Load())
	}
	runtime.KeepAlive(o)
}

func nonZero(v byte) bool { return v != 0 }

func hugeWhy() string { _, why := hugeMode(); return why }

// TestHugeAllocFallback: with huge pages off, a failed mapping, a nil
// allocator or a small size, the bytes come from the Go heap, with no
// error, aligned and zeroed as before.
func TestHugeAllocFallback(t *testing.T) {
	failing := &hugeAlloc{mapper: func(uintptr) ([]byte, []byte, error) { return nil, nil, errors.New("refused") }}
	for _, c := range []struct {
		name string
		a    *hugeAlloc
		n    int
	}{
		{"off", &hugeAlloc{off: true}, 1 << 20},
		{"nil", nil, 1 << 20},
		{"small", &hugeAlloc{}, hugeMin - 64},
		{"mmap refused", failing, 1 << 20},
		{"mmap refused, own mapping", failing, ownMapMin},
	} {
		b, owner := c.a.bytes(c.n)
		if owner != nil || len(b) != c.n || uintptr(unsafe.Pointer(&b[0]))%64 != 0 || slices.ContainsFunc(b[:64], nonZero) || slices.ContainsFunc(b[c.n-64:], nonZero) {
			t.Errorf("%s: owner %v, %d bytes at %p", c.name, owner, len(b), &b[0])
		}
	}
	if failing.stats != nil && failing.stats.chunks.Load() != 0 {
		t.Errorf("a refused mapping counted")
	}
	thp := func() (bool, string) { return true, "madvise" }
	if on, why := hugeDecision("0", thp); on || why != EnvHugePages+"=0" {
		t.Errorf("%s=0: on %v (%s)", EnvHugePages, on, why)
	}
	for _, v := range []string{"", "1"} {
		if on, _ := hugeDecision(v, thp); !on {
			t.Errorf("%s=%q: off", EnvHugePages, v)
		}
	}
	for s, want := range map[string]string{"always [madvise] never\n": "madvise", "[always] madvise never": "always", "always madvise [never]": "never", "": "", "[oops": ""} {
		if got := thpSetting(s); got != want {
			t.Errorf("thpSetting(%q) = %q, want %q", s, got, want)
		}
	}
}

// TestPackOnHugePages: a device's packs land in its allocator's chunks
// with the heap packs' bytes, and the chunks are unmapped once the device
// has dropped them and no kernel holds them.
func TestPackOnHugePages(t *testing.T) {
	withPacking(t)
	r := rand.New(rand.NewPCG(7, 8))
	e := acceltest.Open(t, "cpu", accel.Options{})
	dev := e.Dev.(*Device)
	const out, in = 300, 200 // 240 KB of panels
	ws := make([]accel.Tensor, 3)
	for i := range ws {
		ws[i] = e.F32(acceltest.Rand(r, out*in, 1), out, in)
	}
	if err := dev.PackWeights(ws...); err != nil {
		t.Fatal(err)
	}
	for _, tn := range ws {
		w := resolve(tn)
		dev.packs.mu.Lock()
		en := dev.packs.byKey[packKey{m: w.m, off: w.off, rows: w.rows, cols: w.cols, dt: w.dt}]
		dev.packs.mu.Unlock()
		if en == nil || en.p == nil {
			t.Fatalf("no pack of %v", tn)
		}
		if (en.p.owner != nil) != hugePagesOn() {
			t.Fatalf("pack owner %v, huge pages on %v", en.p.owner != nil, hugePagesOn())
		}
		if !slices.Equal(packWeights(w).data, en.p.data) {
			t.Fatal("a pack's bytes differ from the heap pack of its weights")
		}
	}
	a := &dev.packs.huge
	if hugePagesOn() && a.stats.chunks.Load() != 1 {
		t.Fatalf("%d chunks for three packs, want 1", a.stats.chunks.Load())
	}
	x := e.F32(acceltest.Rand(r, 2*in, 1), 2, in)
	y := e.Zeros(accel.F32, 2, out)
	accel.On(e.S).MatMul(y, x, ws[0])
	_ = e.ReadF32(y)
	for _, tn := range ws {
		if err := dev.Free(tn.Buf); err != nil {
			t.Fatal(err)
		}
	}
	waitUnmapped(t, a, 0)
}
